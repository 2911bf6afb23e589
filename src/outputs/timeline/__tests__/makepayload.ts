/**
 * Timeline payloads that look like the kernel's (timeline.schema.json), made from a simulated training step:
 * parameters allocated in one cell, then forward activations (freed in reverse in the backward), gradients,
 * temporary gradients of the activations, optimizer state, an input batch, small allocations summed per
 * category, and reserved memory in 2 MiB segments. The peak, and what is alive at it grouped by (category,
 * stack) with "the rest" beyond 200 groups, are computed as the schema says, so the sizes sum to the peak.
 *
 * Used by the jest specs and by the Galata specs (ui-tests/tests/timeline*.spec.ts import it): its only
 * runtime import is geometry.ts, which imports types only.
 */
import type {
  ITimelineBand,
  ITimelineByCategory,
  ITimelineCategory,
  ITimelineFrame,
  ITimelineHolder,
  ITimelinePayload,
  ITimelineSmallPoint,
  ITimelineStack
} from '../../../wire/analysispayload';
import { CATEGORIES } from '../geometry';

export interface IMakeOptions {
  /** Layers of the model: 6 bands per layer, plus the input. */
  readonly layers?: number;
  /** Small allocations per layer in the forward (each allocated and freed: 2 points of `small`). */
  readonly smallPerLayer?: number;
  readonly source?: 'recorded' | 'predicted';
  readonly baseline?: number;
  /** A file name for the user's frames (a hostile one checks escaping). */
  readonly userFile?: string;
  /** Frames in notebook cells (In [N]) or in a file. */
  readonly inCells?: boolean;
  readonly failed?: boolean;
  readonly reserved?: boolean;
  readonly notes?: ReadonlyArray<string>;
  readonly seed?: number;
}

const MIB = 1024 * 1024;
const CATS = CATEGORIES;

function zero(): ITimelineByCategory {
  return { parameter: 0, gradient: 0, optimizer_state: 0, activation: 0, input: 0, other: 0 };
}

export function makePayload(options: IMakeOptions = {}): ITimelinePayload {
  const layers = options.layers ?? 6;
  const smallPerLayer = options.smallPerLayer ?? 1;
  const inCells = options.inCells ?? true;
  const userFile = options.userFile ?? 'train.py';
  let seed = options.seed ?? 7;
  const random = (): number => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };
  const size = (lo: number, hi: number): number =>
    Math.round(((lo + random() * (hi - lo)) * MIB) / 512) * 512;

  const stacks: ITimelineStack[] = [];
  const stackIds = new Map<string, number>();
  const stackFor = (
    cell: number,
    line: number,
    name: string,
    library: ReadonlyArray<[string, number, string]>
  ): number => {
    const key = `${cell}:${line}:${name}:${library.map(l => l.join(':')).join('|')}`;
    const known = stackIds.get(key);
    if (known !== undefined) {
      return known;
    }
    const user: ITimelineFrame = inCells
      ? { file: `/tmp/ipykernel_1234/${cell}.py`, line, name, cell, user: true }
      : { file: userFile, line, name, cell: null, user: true };
    const frames: ITimelineFrame[] = [
      ...library.map(([file, l, n]) => ({ file, line: l, name: n, cell: null, user: false })),
      user,
      inCells
        ? { file: '/tmp/ipykernel_1234/9.py', line: 1, name: '<module>', cell: 9, user: true }
        : { file: userFile, line: 200, name: 'main', cell: null, user: true }
    ];
    stacks.push({ frames, source: library.length });
    stackIds.set(key, stacks.length - 1);
    return stacks.length - 1;
  };
  const LINEAR: Array<[string, number, string]> = [
    ['torch/nn/modules/linear.py', 125, 'forward'],
    ['torch/nn/modules/module.py', 1762, '_call_impl']
  ];
  const AUTOGRAD: Array<[string, number, string]> = [
    ['torch/autograd/graph.py', 824, '_engine_run_backward']
  ];
  const ADAM: Array<[string, number, string]> = [
    ['torch/optim/adam.py', 171, '_init_group'],
    ['torch/optim/optimizer.py', 493, 'wrapper']
  ];

  const bands: ITimelineBand[] = [];
  let t = 0;
  const alloc = (bytes: number, category: ITimelineCategory, stack: number | null): ITimelineBand => {
    const band: ITimelineBand = { size: bytes, category, start: t++, end: null, stack };
    bands.push(band);
    return band;
  };
  const free = (band: ITimelineBand): void => {
    band.end = t++;
  };
  const small: ITimelineSmallPoint[] = [];
  const smallNow = zero();
  const smallEvent = (category: ITimelineCategory, delta: number): void => {
    smallNow[category] += delta;
    small.push({ at: t++, bytes: { ...smallNow } });
  };

  const params = Array.from({ length: layers }, (_, i) =>
    alloc(
      size(1, 8),
      'parameter',
      stackFor(3, 4 + (i % 150), '__init__', [['torch/nn/modules/linear.py', 106, '__init__']])
    )
  );
  const input = alloc(size(4, 12), 'input', stackFor(5, 2, '<module>', []));
  const acts: ITimelineBand[] = [];
  params.forEach((_, i) => {
    acts.push(alloc(size(2, 24), 'activation', stackFor(4, 10 + (i % 40), 'forward', LINEAR)));
    for (let s = 0; s < smallPerLayer; s++) {
      smallEvent('activation', 4096 * (1 + (s % 3)));
    }
  });
  for (let i = layers - 1; i >= 0; i--) {
    const temp = alloc(size(1, 6), 'other', stackFor(5, 6, '<module>', AUTOGRAD));
    alloc(
      params[i].size,
      'gradient',
      stackFor(5, 6, '<module>', [...AUTOGRAD.slice(0, 1), ['torch/autograd/__init__.py', 353, 'backward']])
    );
    free(acts[i]);
    free(temp);
    for (let s = 0; s < smallPerLayer; s++) {
      smallEvent('activation', -4096 * (1 + (s % 3)));
    }
  }
  params.forEach((p, i) => {
    alloc(
      p.size,
      'optimizer_state',
      stackFor(5, 7, '<module>', [['torch/optim/adam.py', 160 + (i % 3), '_init_group'], ...ADAM.slice(1)])
    );
    alloc(
      p.size,
      'optimizer_state',
      stackFor(5, 7, '<module>', [['torch/optim/adam.py', 180 + (i % 100), '_init_group'], ...ADAM.slice(1)])
    );
  });
  free(input);
  const end = t;

  // The totals: baseline + bands + small, at every event; the peak is the first maximum.
  const baseline = options.baseline ?? 0;
  const delta = new Float64Array(end + 1);
  for (const b of bands) {
    delta[b.start] += b.size;
    if (b.end !== null) {
      delta[b.end] -= b.size;
    }
  }
  const smallAt = new Map(small.map(p => [p.at, p]));
  let bandTotal = baseline;
  let smallTotal = 0;
  let peakBytes = -1;
  let peakAt = 0;
  const totals: number[] = [];
  for (let x = 0; x < end; x++) {
    bandTotal += delta[x];
    const p = smallAt.get(x);
    if (p !== undefined) {
      smallTotal = CATS.reduce((sum, c) => sum + p.bytes[c], 0);
    }
    totals.push(bandTotal + smallTotal);
    if (bandTotal + smallTotal > peakBytes) {
      peakBytes = bandTotal + smallTotal;
      peakAt = x;
    }
  }

  // Alive at the peak, grouped by (category, stack); the small allocations per category; the baseline.
  const groups = new Map<string, ITimelineHolder>();
  for (const b of bands) {
    if (b.start <= peakAt && (b.end === null || b.end > peakAt)) {
      const key = `${b.category}/${b.stack}`;
      const g = groups.get(key);
      groups.set(
        key,
        g === undefined
          ? { size: b.size, count: 1, category: b.category, stack: b.stack, rest: false }
          : { ...g, size: g.size + b.size, count: g.count + 1 }
      );
    }
  }
  const lastSmall = [...small].reverse().find(p => p.at <= peakAt);
  for (const c of CATS) {
    const bytes = lastSmall?.bytes[c] ?? 0;
    if (bytes > 0) {
      groups.set(`small/${c}`, {
        size: bytes,
        count: Math.max(1, Math.round(bytes / 8192)),
        category: c,
        stack: null,
        rest: false
      });
    }
  }
  if (baseline > 0) {
    groups.set('baseline', { size: baseline, count: 1, category: 'other', stack: null, rest: false });
  }
  let holders = [...groups.values()].sort((a, b) => b.size - a.size);
  if (holders.length > 200) {
    const rest = holders.slice(200);
    holders = [
      ...holders.slice(0, 200),
      {
        size: rest.reduce((s, h) => s + h.size, 0),
        count: rest.reduce((s, h) => s + h.count, 0),
        category: 'other',
        stack: null,
        rest: true
      }
    ];
  }

  let reserved: ITimelinePayload['reserved'] = null;
  let peakReserved: number | null = null;
  if (options.reserved ?? true) {
    const seg = 2 * MIB;
    const points: Array<{ at: number; bytes: number }> = [];
    let r = 0;
    const stride = Math.max(1, Math.ceil(end / 3000));
    for (let x = 0; x < end; x += stride) {
      const need = Math.ceil(Math.max(...totals.slice(x, x + stride)) / seg) * seg;
      if (need > r) {
        r = need;
        points.push({ at: x, bytes: r });
      }
      if (x <= peakAt) {
        peakReserved = r;
      }
    }
    reserved = points;
  }

  const failed: ITimelinePayload['failed'] = options.failed
    ? { size: 20 * 1024 * MIB, device_free: 3 * 1024 * MIB, stack: stackFor(5, 6, '<module>', AUTOGRAD) }
    : null;
  return {
    version: 1,
    id: 'tl-0123456789abcdef',
    source: options.source ?? 'predicted',
    title: options.source === 'recorded' ? 'In [5]' : `mlp${layers}, batch 32, AdamW, fp32`,
    device:
      options.source === 'recorded'
        ? { name: 'NVIDIA H100 80GB HBM3', index: 0, total: 85520809984 }
        : { name: 'NVIDIA GeForce RTX 4080 SUPER', index: null, total: 17171480576 },
    created: 1763855000.5,
    events_total: bands.reduce((n, b) => n + (b.end === null ? 1 : 2), 0) + small.length,
    events_dropped: 0,
    min_band_bytes: smallPerLayer > 0 ? 1 * MIB : 0,
    baseline,
    end,
    peak: { bytes: peakBytes, at: peakAt, reserved: peakReserved },
    bands,
    small,
    reserved,
    alive_at_peak: holders,
    stacks,
    failed,
    notes: options.notes ? [...options.notes] : ['allocations under 1.00 MiB are summed per category']
  };
}

/** The largest payload the schema allows: 4000 bands, 4000 small points, 4000 reserved steps at most. */
export function maximumPayload(): ITimelinePayload {
  // 6 bands per layer + the input: 666 layers make 3997 bands; 3 small allocations per layer make 3996 points.
  return makePayload({ layers: 666, smallPerLayer: 3, baseline: 512 * MIB, source: 'recorded' });
}
