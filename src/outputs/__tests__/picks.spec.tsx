/**
 * @jest-environment jsdom
 * @jest-environment-options {"customExportConditions": ["node", "node-addons"]}
 *
 * Numbers that must add up in the analysis and autobatch outputs: each caption states the share of the
 * maximum its own numbers are, the rounding that made a pick (and where it came from) is shown, and the
 * stacked bar's figures are the table's "At the peak" figures.
 */
import '../../__tests__/domshim';

import type { IAnalysisPayload, IAutobatchPayload } from '../../wire/analysispayload';
import { ANALYSIS_MIME, AUTOBATCH_MIME } from '../renderers';
import { breakdownRows } from '../analysis/breakdown';
import { size } from '../analysis/figures';
import { stackCaption, stackSegments } from '../analysis/stack';
import { percent } from '../picks';
import { untranslated } from '../../ui/i18n';
import {
  ANALYSIS_FIXTURES,
  fixture,
  harness,
  type IHarness,
  mutate,
  texts
} from '../../__tests__/analysisfixtures';

let h: IHarness | null = null;

afterEach(() => {
  h?.dispose();
  h = null;
});

async function show(mime: string, data: unknown): Promise<HTMLElement> {
  h = harness(mime, { copy: () => undefined });
  await h.render(data);
  return h.node;
}

function detail(node: HTMLElement, card: string): string {
  return node.querySelector(`.jp-GpuMem-card[data-card="${card}"] .jp-GpuMem-cardDetail`)?.textContent ?? '';
}

function withPicks(maximum: number, recommended: number, safe: number): IAnalysisPayload {
  let data = mutate(fixture('analysis_target'), 'recommendations.maximum', maximum);
  data = mutate(data, 'recommendations.recommended', recommended);
  return mutate(data, 'recommendations.safe', safe) as unknown as IAnalysisPayload;
}

describe('captions say the share their numbers are', () => {
  it('analysis: 256 of 507 is 50%, 128 is 25% (not "~60%" and "~40%")', async () => {
    const node = await show(ANALYSIS_MIME, withPicks(507, 256, 128));
    expect(detail(node, 'recommended')).toBe(
      'balanced · 50% of the maximum 507; aim 60%, rounded down to a power of two'
    );
    expect(detail(node, 'safe')).toBe(
      'conservative · 25% of the maximum 507; aim 40%, rounded down to a power of two'
    );
  });

  it.each(['analysis_target', 'analysis_accum', 'analysis_hostile'])(
    '%s: the card shares are computed from the card values',
    async name => {
      const p = fixture(name) as unknown as IAnalysisPayload;
      const recs = p.recommendations;
      const node = await show(ANALYSIS_MIME, p);
      const maximum = recs.maximum as number;
      for (const pick of ['recommended', 'safe'] as const) {
        const share = percent(recs[pick] as number, maximum);
        expect(detail(node, pick)).toContain(`${share}% of the maximum ${maximum}; aim `);
        expect(detail(node, pick)).toContain(`rounded down to a ${recs.rounding}`);
      }
    }
  );

  it('an output written before payloads said the aims still reads 60% and 40%', async () => {
    const old = mutate(withPicks(507, 256, 128), 'settings.pick_shares', undefined);
    const node = await show(ANALYSIS_MIME, mutate(old, 'settings.round_source', undefined));
    expect(detail(node, 'recommended')).toContain('aim 60%');
    expect(detail(node, 'safe')).toContain('aim 40%');
    expect(texts(node, '.jp-GpuMem-richFact')).toContain('picks rounded: power of two');
  });

  it('autobatch: 16 is 38% below the maximum 26 (not "10%", the margin)', async () => {
    let data = mutate(fixture('autobatch_simulated'), 'maximum', 26);
    data = mutate(data, 'recommended', 16);
    const node = await show(AUTOBATCH_MIME, mutate(data, 'margin', 0.1));
    expect(detail(node, 'recommended')).toBe(
      '38% below the maximum 26; margin 10%, rounded down to a power of two'
    );
  });

  it('autobatch: the fixtures read back their own numbers', async () => {
    for (const name of ['autobatch_simulated', 'autobatch_scan']) {
      const p = fixture(name) as unknown as IAutobatchPayload;
      const node = await show(AUTOBATCH_MIME, p);
      const below = percent(p.maximum - p.recommended, p.maximum);
      expect(detail(node, 'recommended')).toContain(`${below}% below the maximum ${p.maximum}; margin `);
      h?.dispose();
      h = null;
    }
  });
});

describe('the rounding the picks used is shown', () => {
  it('analysis: the rounding and where it came from', async () => {
    let data = mutate(withPicks(507, 304, 200), 'recommendations.rounding', 'multiple of 8');
    data = mutate(data, 'settings.round', '8');
    const node = await show(ANALYSIS_MIME, mutate(data, 'settings.round_source', 'setting'));
    expect(detail(node, 'recommended')).toBe(
      'balanced · 60% of the maximum 507; aim 60%, rounded down to a multiple of 8'
    );
    expect(texts(node, '.jp-GpuMem-richFact')).toContain('picks rounded: multiple of 8 (JupyterLab setting)');
  });

  it('autobatch: none, from --round', async () => {
    let data = mutate(fixture('autobatch_scan'), 'rounding', 'none');
    data = mutate(data, 'round', 'none');
    const node = await show(AUTOBATCH_MIME, mutate(data, 'round_source', 'option'));
    expect(detail(node, 'recommended')).toContain('rounded down to a whole batch');
    expect(texts(node, '.jp-GpuMem-richFact')).toContain('rounded: none (--round)');
  });
});

describe('the stacked bar and the table show the same figures', () => {
  it.each(ANALYSIS_FIXTURES)('%s: every bar figure is in the table, under "At the peak"', async name => {
    const p = fixture(name) as unknown as IAnalysisPayload;
    const node = await show(ANALYSIS_MIME, p);
    const rows = breakdownRows(p, untranslated);
    const row = (key: string) => rows.find(r => r.key === key);
    const states = row('states');
    // the table's "Model states" is the sum of its four rows, as the text report's "Total Model"
    expect(states?.bytes).toBe(p.parameters_bytes + p.buffers_bytes + p.gradients_bytes + p.optimizer_bytes);
    const bar = Object.fromEntries(stackSegments(p, untranslated).map(s => [s.key, s.bytes]));
    expect(states?.atPeak).toBe(bar.states);
    expect(row('activations')?.atPeak).toBe(bar.activations);
    expect(row('input')?.atPeak).toBe(bar.input);
    expect(row('workspace')?.atPeak).toBe(bar.workspace);
    expect(row('context')?.atPeak).toBe(bar.context);
    // and on screen: the legend's "model states" figure is the "Model states" row's "At the peak" cell
    const legend = texts(node, '.jp-GpuMem-stack .jp-GpuMem-chartLegendItem');
    expect(legend).toContain(`model states ${size(bar.states)}`);
    const cell = node.querySelector('.jp-GpuMem-breakdown tr[data-row="states"] td[data-column="at-peak"]');
    expect(cell?.textContent).toBe(size(bar.states));
    expect(node.querySelector('.jp-GpuMem-stack figcaption')?.textContent).toBe(
      stackCaption(p, untranslated)
    );
    expect(stackCaption(p, untranslated)).toMatch(/^Alive at the peak \(/);
  });

  it("the issue's case: model states at the peak are less than the step's (gradients not all alive yet)", () => {
    const p = fixture('analysis_accum') as unknown as IAnalysisPayload;
    const states = breakdownRows(p, untranslated).find(r => r.key === 'states');
    expect(states?.atPeak).toBeLessThan(states?.bytes as number);
  });

  it('an output without a breakdown labels the bar as step sizes and has no "At the peak" column', async () => {
    const p = mutate(fixture('analysis_target'), 'breakdown_at_peak', null) as unknown as IAnalysisPayload;
    const node = await show(ANALYSIS_MIME, p);
    expect(node.querySelector('.jp-GpuMem-breakdown td[data-column="at-peak"]')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-stack figcaption')?.textContent).toMatch(/^Step sizes: /);
  });
});
