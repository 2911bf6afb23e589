/**
 * @jest-environment jsdom
 * @jest-environment-options {"customExportConditions": ["node", "node-addons"]}
 *
 * The `%gpumem analyze` renderer with real payloads (src/__tests__/fixtures, from CPU runs of small torch
 * models). "Copy as YAML" and "Insert code" hand over the kernel's text verbatim (the numbers in it are
 * checked by tests/analysis/test_analysis_yaml.py).
 */
import '../../__tests__/domshim';

import type { IAnalysisPayload } from '../../wire/analysispayload';
import { breakdownRows } from '../analysis/breakdown';
import { peakAt } from '../analysis/curve';
import { size } from '../analysis/figures';
import { stackSegments } from '../analysis/stack';
import { accumulationCode } from '../analysis/view';
import { untranslated } from '../../ui/i18n';
import {
  ANALYSIS_MIME,
  createGpumemRendererFactories,
  gpumemRendererFactories,
  RENDERER_RANK
} from '../renderers';
import type { IInlineHost } from '../../tokens';
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
let inserted: Array<[string, HTMLElement]>;

beforeEach(() => {
  copied = [];
  inserted = [];
});

afterEach(() => {
  h?.dispose();
});

async function show(data: unknown, withInsert = false): Promise<HTMLElement> {
  h = harness(ANALYSIS_MIME, {
    copy: text => {
      copied.push(text);
    },
    insertCell: withInsert ? (code, origin) => inserted.push([code, origin]) : undefined
  });
  await h.render(data);
  return h.node;
}

function payload(name: string): IAnalysisPayload {
  return fixture(name) as unknown as IAnalysisPayload;
}

/** The kernel-written fields of an analysis payload (src/__tests__/fixtures carry them). */
function written(p: unknown): { config_yaml: string; accumulation_code: string | null } {
  return p as { config_yaml: string; accumulation_code: string | null };
}

/** The YAML "Copy as YAML" copies: the payload's own, verbatim. */
function yamlOf(node: HTMLElement, p: unknown): string {
  const text = node.querySelector('.jp-GpuMem-copyYaml')?.getAttribute('data-yaml');
  expect(text).toBe(written(p).config_yaml);
  return text as string;
}

describe('the renderer factories', () => {
  it('cover the four MIME types, safe, ahead of text/html', () => {
    expect(gpumemRendererFactories.map(f => f.mimeTypes)).toEqual([
      ['application/vnd.gpumem.analysis.v1+json'],
      ['application/vnd.gpumem.autobatch.v1+json'],
      ['application/vnd.gpumem.benchmark.v1+json'],
      ['application/vnd.gpumem.timeline.v1+json']
    ]);
    for (const factory of createGpumemRendererFactories()) {
      expect(factory.safe).toBe(true);
      expect(factory.defaultRank).toBe(RENDERER_RANK);
      expect(factory.defaultRank as number).toBeLessThan(50);
    }
  });
});

describe('analysis: planning for an RTX 4080 Super (traced, bf16, target effective batch 256)', () => {
  const p = payload('analysis_target');

  it('shows the breakdown table with an engine per category', async () => {
    const node = await show(p);
    const rows = [...node.querySelectorAll('.jp-GpuMem-breakdown tbody tr')];
    expect(rows.map(r => r.getAttribute('data-row'))).toEqual([
      'parameters',
      'buffers',
      'gradients',
      'optimizer',
      'states',
      'activations',
      'input',
      'autocast_cache',
      'temporaries',
      'workspace',
      'context'
    ]);
    const cells = (key: string): string[] =>
      texts(node.querySelector(`.jp-GpuMem-breakdown tr[data-row="${key}"]`) as Element, 'td');
    // category, size in the step, alive at the peak (the stacked bar's figure), engine, note
    expect(cells('parameters').slice(0, 4)).toEqual(['Parameters', '135 KiB', '135 KiB', 'read']);
    expect(cells('activations').slice(0, 4)).toEqual(['Activations', '8.78 MiB', '8.75 MiB', 'traced']);
    expect(cells('context').slice(0, 4)).toEqual(['CUDA context', '448 MiB', '448 MiB', 'estimate']);
    expect(cells('context')[4]).toBe('estimate: CUDA 12.4, lazy loading, sm_89, cuBLAS + cuBLASLt');
    expect(cells('optimizer')[4]).toContain('AdamW');
    const foot = texts(node, '.jp-GpuMem-breakdown tfoot tr[data-row="peak"] td');
    expect(foot[0]).toBe('490 MiB');
    // every figure engine shown is one of the payload's words
    for (const engine of texts(node, '.jp-GpuMem-breakdown .jp-GpuMem-engine')) {
      expect([
        'read',
        'traced',
        'measured',
        'modelled',
        'estimate',
        'measured (NVML)',
        'PyTorch default'
      ]).toContain(engine);
    }
  });

  it('shows the recommendation cards', async () => {
    const node = await show(p);
    const value = (kind: string): string =>
      node.querySelector(`.jp-GpuMem-card[data-card="${kind}"] .jp-GpuMem-cardValue`)?.textContent ?? '';
    expect(value('maximum')).toBe(String(p.recommendations.maximum));
    expect(value('recommended')).toBe(String(p.recommendations.recommended));
    expect(value('safe')).toBe(String(p.recommendations.safe));
    expect(value('current')).toBe('32');
    expect(
      node.querySelector('.jp-GpuMem-card[data-card="current"] .jp-GpuMem-statusWord')?.textContent
    ).toBe('fits');
    expect(node.querySelector('.jp-GpuMem-card[data-card="current"]')?.classList).toContain(
      'jp-GpuMem-status-fits'
    );
    expect(
      node.querySelector('.jp-GpuMem-card[data-card="accumulation"] .jp-GpuMem-cardDetail')?.textContent
    ).toBe('not needed: batch 256 reaches the target effective batch');
    expect(node.querySelector('.jp-GpuMem-card[data-card="lr"] .jp-GpuMem-cardDetail')?.textContent).toBe(
      `square-root / linear rule · ${p.recommendations.lr.hint}`
    );
    expect(node.querySelector('.jp-GpuMem-card[data-card="lr"] .jp-GpuMem-cardValue')?.textContent).toBe(
      '×2.83 / ×8.00'
    );
    expect(
      node.querySelector('.jp-GpuMem-card[data-card="maximum"] .jp-GpuMem-richBadge-extrapolated')
    ).toBeNull();
    expect(node.querySelector('.jp-GpuMem-errorBound')?.textContent).toContain(p.error_bound.statement);
    expect(texts(node, '.jp-GpuMem-richNotes li')).toEqual(p.notes);
    expect(node.querySelector('.jp-GpuMem-richBadge-traced')?.textContent).toBe('traced');
    expect(node.querySelector('.jp-GpuMem-richBadge-bound')?.textContent).toBe('±10%');
  });

  it('draws the curve with the device limit and four markers (three picks + the current batch)', async () => {
    const node = await show(p);
    const svg = node.querySelector('.jp-GpuMem-analysisChart svg.jp-GpuMem-chartSvg') as SVGElement;
    expect(svg).not.toBeNull();
    const markers = [...svg.querySelectorAll('.jp-GpuMem-chartMarker')];
    expect(markers.map(m => m.getAttribute('data-kind'))).toEqual([
      'safe',
      'recommended',
      'maximum',
      'current'
    ]);
    expect(svg.querySelectorAll('.jp-GpuMem-chartMarker-extrapolated')).toHaveLength(0);
    expect(svg.querySelector('.jp-GpuMem-chartRule[data-rule="limit"]')).not.toBeNull();
    expect(svg.querySelectorAll('circle.jp-GpuMem-chartDot[data-series="peak"]')).toHaveLength(
      p.curve.length
    );
    // on the log axis the line passes through the markers (drawn through intermediate points)
    expect(
      (svg.querySelector('polyline[data-series="peak"]')?.getAttribute('points')?.split(' ') ?? []).length
    ).toBeGreaterThan(p.curve.length);
    const atMaximum = p.curve.find(c => c.batch_size === p.recommendations.maximum);
    expect(markers[2].querySelector('title')?.textContent).toBe(
      `maximum: batch ${p.recommendations.maximum}, predicted peak ${size(atMaximum?.peak_bytes)}`
    );
  });

  it('stacks the step against the device limit, ending with the free memory', async () => {
    const node = await show(p);
    const segments = [...node.querySelectorAll('.jp-GpuMem-stackSvg rect')].map(r =>
      r.getAttribute('data-segment')
    );
    expect(segments).toEqual(['states', 'activations', 'input', 'workspace', 'other', 'context', 'free']);
    const stack = stackSegments(p, untranslated);
    const sum = stack.reduce((s, seg) => s + seg.bytes, 0);
    expect(sum).toBe(p.device.limit_bytes);
    expect(stack.filter(s => s.key !== 'free').reduce((s, seg) => s + seg.bytes, 0)).toBe(p.peak_bytes);
  });

  it('copies the YAML the kernel wrote into the payload', async () => {
    const node = await show(p);
    const yaml = yamlOf(node, p);
    // a recommended batch above the explicit target effective batch is capped to it (by the kernel)
    expect(yaml).toContain(
      `\ndata:\n  batch_size: ${p.recommendations.accumulation.target_effective_batch}\n`
    );

    const button = node.querySelector('.jp-GpuMem-copyYaml') as HTMLButtonElement;
    await h.render(p); // same payload again: no change
    const { act } = await import('react');
    await act(async () => {
      button.click();
    });
    expect(copied).toEqual([button.getAttribute('data-yaml')]);
    expect(button.textContent).toBe('Copied');
    expect(node.querySelector('.jp-GpuMem-yaml')?.textContent).toBe(written(p).config_yaml);
  });

  it('has no "Insert code" without a handler, nor when no accumulation is needed', async () => {
    let node = await show(p);
    expect(node.querySelector('.jp-GpuMem-insertCode')).toBeNull();
    h.dispose();
    node = await show(p, true);
    expect(node.querySelector('.jp-GpuMem-insertCode')).toBeNull();
    expect(accumulationCode(p)).toBeNull();
  });
});

describe('analysis: --memory 3GiB, fp16, target effective batch 2048, multiples of 8', () => {
  const p = payload('analysis_accum');

  it('recommends accumulation steps and copies them', async () => {
    const node = await show(p);
    const recs = p.recommendations;
    expect(recs.accumulation.recommended).toBeGreaterThan(1);
    expect(
      node.querySelector('.jp-GpuMem-card[data-card="accumulation"] .jp-GpuMem-cardValue')?.textContent
    ).toBe(`×${recs.accumulation.recommended}`);
    expect(
      node.querySelector('.jp-GpuMem-card[data-card="accumulation"] .jp-GpuMem-cardDetail')?.textContent
    ).toBe(
      `${recs.accumulation.recommended} steps of ${recs.recommended} → effective batch ${
        (recs.accumulation.recommended as number) * (recs.recommended as number)
      } (target 2048)`
    );
    const yaml = yamlOf(node, p);
    expect(yaml).toContain(`  batch_size: ${recs.recommended}\n`);
    expect(yaml).toContain(`  gradient_accumulation_steps: ${recs.accumulation.recommended}\n`);
    expect(yaml).toContain('  amp_dtype: float16\n');
  });

  it('"Insert code" hands a gradient-accumulation loop to the injected callback', async () => {
    const node = await show(p, true);
    const button = node.querySelector('.jp-GpuMem-insertCode') as HTMLButtonElement;
    expect(button.textContent).toBe('Insert code');
    const { act } = await import('react');
    act(() => button.click());
    expect(inserted).toHaveLength(1);
    const [code, origin] = inserted[0];
    expect(origin).toBe(h.node);
    expect(code).toContain(`batch_size = ${p.recommendations.recommended}`);
    expect(code).toContain(`accumulation_steps = ${p.recommendations.accumulation.recommended}`);
    expect(code).toContain('scaler = torch.amp.GradScaler(device.type)');
    expect(code).toContain('dtype=torch.float16');
    expect(code).toBe(button.getAttribute('data-code'));
    expect(code).toBe(written(p).accumulation_code); // the kernel's loop, verbatim
  });

  it("uses the inline host's, which the renderers' plugin hands over (the IInlineHost token)", async () => {
    const seen: string[] = [];
    // Only "Insert code" is asked of the host here.
    const host = {
      insertCode: (_node: HTMLElement, code: string) => seen.push(code)
    } as unknown as IInlineHost;
    h = harness(ANALYSIS_MIME, { host });
    await h.render(p);
    const { act } = await import('react');
    act(() => (h.node.querySelector('.jp-GpuMem-insertCode') as HTMLButtonElement).click());
    expect(seen).toHaveLength(1);
  });

  it('marks an extrapolated maximum', async () => {
    const largest = Math.max(...p.curve.map(c => c.batch_size));
    let data: Json = mutate(p, 'recommendations.extrapolated', true);
    data = mutate(data, 'recommendations.maximum', largest * 2);
    const node = await show(data);
    expect(
      node.querySelector('.jp-GpuMem-card[data-card="maximum"] .jp-GpuMem-richBadge-extrapolated')
        ?.textContent
    ).toBe('extrapolated');
    const max = node.querySelector('.jp-GpuMem-chartMarker[data-kind="maximum"]');
    expect(max?.classList).toContain('jp-GpuMem-chartMarker-extrapolated');
    expect(max?.querySelector('title')?.textContent).toContain('(extrapolated)');
    expect(node.querySelector('.jp-GpuMem-chartLine-extrapolated')).not.toBeNull();
    yamlOf(node, data); // the kernel's text as it is: the browser never rewrites it
  });

  it('peakAt interpolates between curve points and follows the fit beyond them', () => {
    const [a, b] = [p.curve[0], p.curve[1]];
    const mid = Math.round((a.batch_size + b.batch_size) / 2);
    const y = peakAt(p, mid) as number;
    expect(y).toBeGreaterThanOrEqual(Math.min(a.peak_bytes, b.peak_bytes));
    expect(y).toBeLessThanOrEqual(Math.max(a.peak_bytes, b.peak_bytes));
    const fit = p.fit as NonNullable<IAnalysisPayload['fit']>;
    expect(peakAt(p, 10000)).toBeCloseTo(fit.intercept_bytes + fit.slope_bytes_per_sample * 10000, 0);
  });
});

describe('analysis: no GPU and no target', () => {
  const p = payload('analysis_nogpu');

  it('says so, without picks, limit or free memory', async () => {
    const node = await show(p);
    expect(node.querySelector('.jp-GpuMem-richTitle')?.textContent).toContain('no GPU');
    expect(node.querySelector('.jp-GpuMem-card[data-card="maximum"] .jp-GpuMem-cardValue')?.textContent).toBe(
      'n/a'
    );
    expect(
      node.querySelector('.jp-GpuMem-card[data-card="maximum"] .jp-GpuMem-cardDetail')?.textContent
    ).toBe(p.recommendations.note);
    expect(
      node.querySelector('.jp-GpuMem-card[data-card="current"] .jp-GpuMem-statusWord')?.textContent
    ).toBe('unknown (no device limit)');
    const markers = node.querySelectorAll('.jp-GpuMem-analysisChart .jp-GpuMem-chartMarker');
    expect([...markers].map(m => m.getAttribute('data-kind'))).toEqual(['current']);
    expect(node.querySelector('.jp-GpuMem-chartRule')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-stackSvg rect[data-segment="free"]')).toBeNull();
    expect(breakdownRows(p, untranslated).find(r => r.key === 'context')?.note).toBe('no GPU');
    const yaml = yamlOf(node, p);
    expect(yaml).toContain(`\ndata:\n  batch_size: ${p.settings.batch_size}\n`);
    expect(yaml).not.toContain('amp_dtype');
  });
});

describe("analysis: a step of the user's own that entered autocast", () => {
  it("says the AMP is the step's, and 'AMP off' only where no autocast ran", async () => {
    const off = payload('analysis_nogpu');
    expect(texts(await show(off), '.jp-GpuMem-richFact')).toContain('AMP off');
    h.dispose();
    const seen = mutate(mutate(off, 'settings.amp', 'bf16'), 'settings.step_autocast', {
      device_type: 'cuda',
      amp: 'bf16'
    });
    const facts = texts(await show(seen), '.jp-GpuMem-richFact');
    expect(facts).toContain("AMP bf16 (your step's autocast, cuda)");
    expect(facts).not.toContain('AMP off');
  });
});

describe('analysis: hostile strings are text', () => {
  it('a model class and a layer named like markup (a real run) create no element', async () => {
    const p = payload('analysis_hostile');
    expect(p.model.name).toBe(HOSTILE);
    expect(p.model.largest_layer.name).toBe(HOSTILE);
    const node = await show(p);
    expect(node.querySelector('img')).toBeNull();
    expect(document.querySelector('img')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-modelName')?.textContent).toBe(HOSTILE);
    expect(node.textContent).toContain(`largest layer ${HOSTILE}`);
  });

  it.each([
    ['notes', [HOSTILE, '<script>window.__pwned = 1</script>']],
    ['error_bound.statement', `<b onmouseover=alert(1)>${HOSTILE}</b>`],
    ['settings.optimizer', HOSTILE],
    ['settings.input', HOSTILE],
    ['recommendations.lr.hint', HOSTILE],
    ['recommendations.note', HOSTILE],
    ['device.name', HOSTILE],
    ['figures.0.note', HOSTILE]
  ])('%s', async (at, value) => {
    const node = await show(mutate(payload('analysis_target'), at, value));
    expect(node.querySelector('img, script, b')).toBeNull();
    expect(node.textContent).toContain(HOSTILE);
    expect((globalThis as { __pwned?: number }).__pwned).toBeUndefined();
    // the copied YAML is the kernel's (which keeps names in one-line comments), never built from these
    yamlOf(node, payload('analysis_target'));
  });

  it('a model name with newlines cannot add YAML keys or code lines', async () => {
    const data = mutate(
      payload('analysis_accum'),
      'model.name',
      'Net\ndata:\n  batch_size: 999999\nevil: true'
    );
    const node = await show(data, true);
    expect(yamlOf(node, data)).not.toContain('evil');
    expect(node.querySelector('.jp-GpuMem-insertCode')?.getAttribute('data-code')).not.toContain('evil');
  });

  it('an output saved before the kernel wrote the YAML says why there is none to copy', async () => {
    const {
      config_yaml: _yaml,
      accumulation_code: _code,
      ...older
    } = payload('analysis_accum') as unknown as Record<string, unknown>;
    const node = await show(older, true);
    const button = node.querySelector('.jp-GpuMem-copyYaml') as HTMLButtonElement;
    expect(button.disabled).toBe(true);
    expect(button.getAttribute('data-missing')).toBe('older-output');
    expect(button.hasAttribute('data-yaml')).toBe(false);
    expect(button.title).toContain('older version');
    expect(node.querySelector('.jp-GpuMem-insertCode')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-breakdown')).not.toBeNull(); // the rest renders as before
  });
});

describe('analysis: data that does not fit the schema', () => {
  it.each<[string, unknown, string]>([
    ['nothing', undefined, 'analysis: expected an object, got nothing'],
    ['a string', 'hello', 'analysis: expected an object, got the string "hello"'],
    ['an empty object', {}, 'analysis.version: missing'],
    [
      'another version',
      { ...fixture('analysis_target'), version: 2 },
      'analysis.version: expected 1, got the number 2'
    ],
    [
      'a bad status',
      mutate(fixture('analysis_target'), 'recommendations.current.status', 'great'),
      'analysis.recommendations.current.status: expected "fits" or "tight" or "will-not-fit" or "unknown"'
    ],
    [
      'a negative size',
      mutate(fixture('analysis_target'), 'parameters_bytes', -1),
      'analysis.parameters_bytes: expected a non-negative integer'
    ],
    [
      'a curve point without batch',
      mutate(fixture('analysis_target'), 'curve.1.batch_size', undefined),
      'analysis.curve[1].batch_size: missing'
    ]
  ])('%s → one line', async (_, data, problem) => {
    const node = await show(data);
    expect(node.children).toHaveLength(1);
    const line = node.querySelector('.jp-GpuMem-invalid');
    expect(line?.textContent?.startsWith("gpumem: this output's data does not match its schema (")).toBe(
      true
    );
    expect(line?.textContent).toContain(problem);
    expect(line?.textContent).not.toContain('\n');
    expect(node.querySelector('.jp-GpuMem-analysis')).toBeNull();
    expect(h.renderer.problem).toContain(problem);
  });

  it('a later valid payload replaces the message (same output updated)', async () => {
    const node = await show({});
    expect(node.querySelector('.jp-GpuMem-invalid')).not.toBeNull();
    await h.render(fixture('analysis_target'));
    expect(node.querySelector('.jp-GpuMem-invalid')).toBeNull();
    expect(node.querySelectorAll('.jp-GpuMem-analysis')).toHaveLength(1);
    expect(h.renderer.problem).toBeNull();
  });
});
