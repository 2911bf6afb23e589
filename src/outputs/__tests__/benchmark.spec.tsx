/**
 * @jest-environment jsdom
 * @jest-environment-options {"customExportConditions": ["node", "node-addons"]}
 *
 * The `%gpumem benchmark` renderer with real payloads (a simulated sweep of a small MLP: batch 16…4096 ×
 * workers 0/2 × AMP off/on, and one stopped after three rows).
 */
import '../../__tests__/domshim';

import { act } from 'react';

import { type IBenchmarkPayload, PICK_KINDS } from '../../wire/analysispayload';
import { benchmarkChartData, pickRows } from '../benchmark/view';
import { formatCount, formatMs } from '../../ui/format';
import { untranslated } from '../../ui/i18n';
import { BENCHMARK_MIME } from '../renderers';
import {
  fixture,
  harness,
  HOSTILE,
  type IHarness,
  type Json,
  mutate,
  texts
} from '../../__tests__/analysisfixtures';

let h: IHarness;
let copied: string[];

/** The kernel-written `config_yaml` of a benchmark payload (src/__tests__/fixtures carry it). */
function yamlOf(p: unknown): string | null {
  return (p as { config_yaml: string | null }).config_yaml;
}

beforeEach(() => {
  copied = [];
  h = harness(BENCHMARK_MIME, { copy: text => void copied.push(text) });
});

afterEach(() => h.dispose());

function payload(name: string): IBenchmarkPayload {
  return fixture(name) as unknown as IBenchmarkPayload;
}

async function show(data: unknown): Promise<HTMLElement> {
  await h.render(data);
  return h.node;
}

describe('benchmark: a full simulated sweep', () => {
  const p = payload('benchmark_simulated');

  it('shows one table row per configuration with every column', async () => {
    const node = await show(p);
    const rows = node.querySelectorAll('.jp-GpuMem-benchmarkTable tbody tr');
    expect(rows).toHaveLength(p.rows.length);
    expect(p.rows).toHaveLength(20);
    expect(texts(node, '.jp-GpuMem-benchmarkTable thead th')).toEqual([
      'Batch',
      'Workers',
      'AMP',
      'Pin memory',
      'I/O wait ms',
      'H2D ms',
      'Forward ms',
      'Backward ms',
      'Optimizer ms',
      'Step ms',
      'Samples/s',
      'GPU util',
      'Peak memory',
      'Status',
      'Pick'
    ]);
    const first = texts(rows[0], 'td');
    expect(first.slice(0, 4)).toEqual([String(p.rows[0].batch_size), '0', 'no', 'no']);
    expect(first[10]).toBe((p.rows[0].samples_per_s as number).toFixed(1));
    expect(first[11]).toBe('n/a'); // no GPU utilisation on the CPU
    expect(first[13]).toBe('ok');
    const oom = p.rows.findIndex(r => r.status === 'oom');
    expect(texts(rows[oom], 'td')[13]).toBe('OOM');
    expect(rows[oom].querySelector('td[title]')?.getAttribute('title')).toBe(p.rows[oom].error);
    expect(rows[oom].classList).toContain('jp-GpuMem-benchRow-oom');
  });

  it('highlights the three picks in the table and shows their cards', async () => {
    const node = await show(p);
    const rows = node.querySelectorAll('.jp-GpuMem-benchmarkTable tbody tr');
    for (const kind of PICK_KINDS) {
      const pick = p.picks[kind];
      expect(pick).not.toBeNull();
      const row = rows[pick?.row as number];
      expect(row.classList).toContain(`jp-GpuMem-pickRow-${kind}`);
      expect(row.getAttribute('data-picks')?.split(' ')).toContain(kind);
      expect(
        node.querySelector(`.jp-GpuMem-card[data-card="${kind}"] .jp-GpuMem-cardValue`)?.textContent
      ).toBe(`batch ${pick?.batch_size}`);
    }
    const highlighted = node.querySelectorAll('.jp-GpuMem-benchmarkTable tbody tr.jp-GpuMem-pickRow');
    expect(highlighted.length).toBe(new Set(PICK_KINDS.map(k => p.picks[k]?.row)).size);
    expect(node.querySelectorAll('.jp-GpuMem-pickCell .jp-GpuMem-richBadge')).toHaveLength(3);
  });

  it('draws throughput and memory per workers/AMP combination, the picks and the OOM rows', async () => {
    const node = await show(p);
    const svg = node.querySelector('.jp-GpuMem-benchmarkChart svg.jp-GpuMem-chartSvg') as SVGElement;
    expect(svg).not.toBeNull();
    const combos = new Set(p.rows.map(r => `${r.num_workers}-${r.amp}-${r.pin_memory}`));
    expect(combos.size).toBe(4);
    const series = new Set([...svg.querySelectorAll('polyline')].map(l => l.getAttribute('data-series')));
    expect(series.size).toBe(2 * combos.size); // samples/s + peak memory per combination
    const kinds = [...svg.querySelectorAll('.jp-GpuMem-chartMarker')].map(m => m.getAttribute('data-kind'));
    const ooms = p.rows.filter(r => r.status === 'oom').length;
    expect(kinds.filter(k => k === 'oom')).toHaveLength(ooms);
    expect(kinds.filter(k => k !== 'oom')).toEqual([...PICK_KINDS]);
    expect(kinds).toHaveLength(ooms + 3);
    expect(svg.querySelector('[data-rule="limit"]')).not.toBeNull();
    expect(svg.querySelector('[data-rule="target"]')).not.toBeNull();
    expect(texts(node, '.jp-GpuMem-benchmarkChart .jp-GpuMem-chartLegendItem')).toContain(
      '0 workers · fp32: samples/s'
    );
  });

  it('fits its output: the step\'s phases are the columns that give way, and "Step ms" lists them', async () => {
    const node = await show(p);
    expect(texts(node, '.jp-GpuMem-benchmarkTable thead th.jp-GpuMem-phaseCell')).toEqual([
      'I/O wait ms',
      'H2D ms',
      'Forward ms',
      'Backward ms',
      'Optimizer ms'
    ]);
    expect(texts(node, '.jp-GpuMem-benchmarkTable thead th:not(.jp-GpuMem-phaseCell)')).toContain(
      'Samples/s'
    );
    const row = node.querySelector('.jp-GpuMem-benchmarkTable tbody tr') as HTMLElement;
    expect(row.querySelectorAll('td.jp-GpuMem-phaseCell')).toHaveLength(5);
    const step = row.querySelectorAll('td')[9];
    expect(step.textContent).toBe(formatMs(p.rows[0].total_ms));
    expect(step.getAttribute('title')).toBe(
      `I/O wait ${formatMs(p.rows[0].io_ms)} · H2D ${formatMs(p.rows[0].h2d_ms)} · forward ${formatMs(
        p.rows[0].forward_ms
      )} · backward ${formatMs(p.rows[0].backward_ms)} · optimizer ${formatMs(p.rows[0].optimizer_ms)} ms`
    );
  });

  it('keeps the recommended pick off the memory-limit line and names it on the plot', async () => {
    // The highest throughput recommended: the top of the samples/s axis, where the limit line lay when both
    // axes had the same headroom.
    const top = p.picks.highest_throughput;
    const node = await show(mutate(p, 'picks.recommended', { ...top, kind: 'recommended' }));
    const svg = node.querySelector('.jp-GpuMem-benchmarkChart svg') as SVGElement;
    const marker = svg.querySelector('.jp-GpuMem-chartMarker[data-kind="recommended"]') as SVGElement;
    const limit = svg.querySelector('[data-rule="limit"] line') as SVGElement;
    const apart = Math.abs(Number(marker.getAttribute('data-y')) - Number(limit.getAttribute('y1')));
    expect(apart).toBeGreaterThan(12);
    expect(marker.querySelector('text')?.textContent).toBe('recommended');
  });

  it('labels batch sizes as whole numbers, each once', async () => {
    const node = await show(p);
    const ticks = [...node.querySelectorAll('.jp-GpuMem-benchmarkChart line.jp-GpuMem-chartTick')];
    const labels = ticks.map(t => t.parentElement?.querySelector('text')?.textContent ?? '').filter(l => l);
    expect(labels.length).toBeGreaterThanOrEqual(3);
    expect(labels.every(l => /^[\d,]+$/.test(l))).toBe(true);
    expect(labels).toEqual([...new Set(labels)]);
    expect(labels).toContain(formatCount(p.picks.recommended?.batch_size ?? NaN));
  });

  it('says simulated, lists the diagnostics and notes', async () => {
    const node = await show(p);
    expect(node.querySelector('.jp-GpuMem-richBadge-simulated')?.textContent).toBe('simulated');
    expect(node.querySelector('.jp-GpuMem-richBadge-interrupted')).toBeNull();
    expect(texts(node, '.jp-GpuMem-diagnostics li')).toEqual(p.diagnostics);
    expect(texts(node, '.jp-GpuMem-richNotes li')).toEqual(p.notes);
    expect(node.querySelector('.jp-GpuMem-leftoverWorkers')).toBeNull();
  });

  it('copies the recommended configuration the kernel wrote, verbatim', async () => {
    const node = await show(p);
    const button = node.querySelector('.jp-GpuMem-copyYaml') as HTMLButtonElement;
    const yaml = yamlOf(p) as string;
    const pick = p.picks.recommended as NonNullable<IBenchmarkPayload['picks']['recommended']>;
    expect(button.getAttribute('data-yaml')).toBe(yaml);
    expect(yaml).toContain(
      `\ndata:\n  batch_size: ${pick.batch_size}\n  num_workers: ${pick.num_workers}\n  pin_memory: ${pick.pin_memory}\n`
    ); // its numbers are checked by tests/benchmark/test_benchmark.py
    await act(async () => button.click());
    expect(copied).toEqual([yaml]);
  });

  it('an output saved before the kernel wrote the YAML says why there is none to copy', async () => {
    const { config_yaml: _yaml, ...older } = p as unknown as Record<string, unknown>;
    const node = await show(older);
    const button = node.querySelector('.jp-GpuMem-copyYaml') as HTMLButtonElement;
    expect(button.disabled).toBe(true);
    expect(button.getAttribute('data-missing')).toBe('older-output');
    expect(button.textContent).toBe('No YAML in this older output');
    expect(node.querySelectorAll('.jp-GpuMem-benchmarkTable tbody tr')).toHaveLength(p.rows.length);
  });
});

describe('benchmark: energy per sample on a GPU', () => {
  /** The simulated sweep as a GPU run measured it: energy per sample on every row that ran, and its pick. */
  function withEnergy(): Json {
    const p = payload('benchmark_simulated');
    const rows = p.rows.map((r, i) =>
      r.status === 'ok'
        ? { ...r, energy_per_sample_j: 0.05 + 0.01 * ((i * 7) % 5), mean_power_w: 250.5 }
        : { ...r, energy_per_sample_j: null, mean_power_w: null }
    );
    const best = rows.reduce(
      (b, r, i) =>
        r.energy_per_sample_j !== null && r.energy_per_sample_j < (rows[b].energy_per_sample_j ?? Infinity)
          ? i
          : b,
      0
    );
    const r = rows[best];
    const pick = {
      kind: 'most_energy_efficient',
      row: best,
      batch_size: r.batch_size,
      num_workers: r.num_workers,
      amp: r.amp,
      pin_memory: r.pin_memory,
      samples_per_s: r.samples_per_s,
      peak_bytes: r.peak_bytes,
      efficiency: r.efficiency,
      gpu_util: r.gpu_util,
      note: 'lowest energy per sample (NVML: the whole GPU over the measured steps)',
      energy_per_sample_j: r.energy_per_sample_j
    };
    return { ...(p as unknown as Json), rows, picks: { ...p.picks, most_energy_efficient: pick } } as Json;
  }

  it('adds an energy column to every row and the most energy-efficient pick beside the three', async () => {
    const data = withEnergy() as unknown as IBenchmarkPayload;
    const node = await show(data);
    const heads = texts(node, '.jp-GpuMem-benchmarkTable thead th');
    const column = heads.indexOf('Energy/sample');
    expect(column).toBe(heads.indexOf('Peak memory') + 1);
    const rows = node.querySelectorAll('.jp-GpuMem-benchmarkTable tbody tr');
    const oom = data.rows.findIndex(r => r.status === 'oom');
    expect(texts(rows[0], 'td')[column]).toBe(
      `${((data.rows[0].energy_per_sample_j as number) * 1000).toFixed(1)} mJ`
    );
    expect(rows[0].querySelectorAll('td')[column].getAttribute('title')).toBe('mean power 251 W');
    expect(texts(rows[oom], 'td')[column]).toBe('n/a');
    const pick = data.picks.most_energy_efficient as NonNullable<
      IBenchmarkPayload['picks']['most_energy_efficient']
    >;
    expect(rows[pick.row].getAttribute('data-picks')?.split(' ')).toContain('most_energy_efficient');
    const card = node.querySelector('.jp-GpuMem-card[data-card="most_energy_efficient"]');
    expect(card?.querySelector('.jp-GpuMem-cardValue')?.textContent).toBe(`batch ${pick.batch_size}`);
    expect(card?.textContent).toContain('Most energy-efficient');
    expect(card?.textContent).toContain(
      `${((pick.energy_per_sample_j as number) * 1000).toFixed(1)} mJ per sample`
    );
    expect(benchmarkChartData(data, untranslated).markers.map(m => m.kind)).toContain(
      'most_energy_efficient'
    );
  });

  it('a CPU run, or an output from before energy, has neither the column nor the card', async () => {
    const node = await show(mutate(payload('benchmark_simulated'), 'picks.most_energy_efficient', null));
    expect(texts(node, '.jp-GpuMem-benchmarkTable thead th')).not.toContain('Energy/sample');
    expect(node.querySelector('.jp-GpuMem-card[data-card="most_energy_efficient"]')).toBeNull();
    expect(node.querySelectorAll('.jp-GpuMem-pickCard')).toHaveLength(3);
  });
});

describe('benchmark: rows arriving and an interrupted sweep', () => {
  it('re-renders cleanly as the same output is updated with more rows', async () => {
    const full = payload('benchmark_simulated');
    const partial = (n: number): Json => ({
      ...(full as unknown as Json),
      rows: full.rows.slice(0, n),
      picks: { highest_throughput: null, best_efficiency: null, recommended: null },
      diagnostics: [],
      interrupted: false,
      config_yaml: null // no recommended pick yet: nothing to copy
    });
    let node = await show(partial(0));
    expect(node.querySelector('.jp-GpuMem-benchmarkTable tbody')?.textContent).toBe(
      'No configuration has finished yet.'
    );
    expect(node.querySelector('.jp-GpuMem-benchmarkChart')).toBeNull();
    expect((node.querySelector('.jp-GpuMem-copyYaml') as HTMLButtonElement).disabled).toBe(true);
    expect(node.querySelector('.jp-GpuMem-copyYaml')?.hasAttribute('data-yaml')).toBe(false);
    for (const n of [1, 3, 7, 20]) {
      node = await show(partial(n));
      expect(node.querySelectorAll('.jp-GpuMem-benchmark')).toHaveLength(1);
      expect(node.querySelectorAll('.jp-GpuMem-benchmarkTable tbody tr')).toHaveLength(n);
      expect(node.querySelectorAll('.jp-GpuMem-benchmarkChart')).toHaveLength(1);
      expect(node.querySelectorAll('.jp-GpuMem-pickRow')).toHaveLength(0);
    }
    node = await show(full);
    expect(node.querySelectorAll('.jp-GpuMem-benchmarkTable tbody tr')).toHaveLength(20);
    expect(node.querySelectorAll('.jp-GpuMem-pickRow').length).toBeGreaterThan(0);
    expect((node.querySelector('.jp-GpuMem-copyYaml') as HTMLButtonElement).disabled).toBe(false);
  });

  it('shows an interrupted sweep as partial', async () => {
    const p = payload('benchmark_interrupted');
    const node = await show(p);
    expect(p.interrupted).toBe(true);
    expect(node.querySelector('.jp-GpuMem-richBadge-interrupted')?.textContent).toBe('interrupted');
    expect(node.querySelectorAll('.jp-GpuMem-benchmarkTable tbody tr')).toHaveLength(p.rows.length);
    expect(node.querySelector('.jp-GpuMem-copyYaml')?.getAttribute('data-yaml')).toContain(
      '(interrupted sweep)'
    );
  });

  it('a pick whose row index is stale is found by its configuration, or not highlighted', () => {
    const p = payload('benchmark_simulated');
    const rec = p.picks.recommended as NonNullable<IBenchmarkPayload['picks']['recommended']>;
    const moved = mutate(p, 'picks.recommended.row', 0) as unknown as IBenchmarkPayload;
    expect(pickRows(moved).recommended).toBe(rec.row);
    const gone = { ...p, rows: p.rows.filter((_, i) => i !== rec.row) };
    expect(pickRows(gone).recommended).toBe(-1);
    expect(benchmarkChartData(gone, untranslated).markers.some(m => m.kind === 'recommended')).toBe(false);
  });
});

describe('benchmark: hostile strings are text', () => {
  it.each([
    ['model.name', HOSTILE],
    ['data', HOSTILE],
    ['device.name', HOSTILE],
    ['optimizer', HOSTILE],
    ['diagnostics', [HOSTILE]],
    ['notes', [HOSTILE]],
    ['picks.recommended.note', HOSTILE]
  ])('%s', async (at, value) => {
    const node = await show(mutate(payload('benchmark_simulated'), at, value));
    expect(node.querySelector('img')).toBeNull();
    expect(node.textContent).toContain(HOSTILE);
    // the copied YAML is the kernel's (names only in one-line comments), never built from these strings
    expect(node.querySelector('.jp-GpuMem-copyYaml')?.getAttribute('data-yaml')).toBe(
      yamlOf(payload('benchmark_simulated'))
    );
  });

  it('a row error is an attribute, not markup', async () => {
    const p = payload('benchmark_simulated');
    const oom = p.rows.findIndex(r => r.status === 'oom');
    const node = await show(mutate(p, `rows.${oom}.error`, HOSTILE));
    expect(node.querySelector('img')).toBeNull();
    expect(
      node
        .querySelectorAll('.jp-GpuMem-benchmarkTable tbody tr')
        [oom].querySelector('td[title]')
        ?.getAttribute('title')
    ).toBe(HOSTILE);
  });
});

describe('benchmark: data that does not fit the schema', () => {
  it.each<[string, unknown, string]>([
    ['null', null, 'benchmark: expected an object, got null'],
    ['an analysis payload', fixture('analysis_target'), 'benchmark.engine: expected'],
    [
      'a bad status',
      mutate(fixture('benchmark_simulated'), 'rows.2.status', 'slow'),
      'benchmark.rows[2].status'
    ],
    [
      'a memory target above 1',
      mutate(fixture('benchmark_simulated'), 'memory_target', 80),
      'benchmark.memory_target'
    ],
    ['no picks', mutate(fixture('benchmark_simulated'), 'picks', undefined), 'benchmark.picks: missing']
  ])('%s → one line', async (_, data, problem) => {
    const node = await show(data);
    expect(node.children).toHaveLength(1);
    const text = node.querySelector('.jp-GpuMem-invalid')?.textContent ?? '';
    expect(text.startsWith("gpumem: this output's data does not match its schema (")).toBe(true);
    expect(text).toContain(problem);
    expect(node.querySelector('.jp-GpuMem-benchmark')).toBeNull();
  });
});
