/**
 * @jest-environment jsdom
 * @jest-environment-options {"customExportConditions": ["node", "node-addons"]}
 *
 * The `%gpumem autobatch` renderer with real payloads (simulated searches on a small MLP: one started from
 * the analysis prediction, one scanning from batch 64 with multiples of 8).
 */
import '../../__tests__/domshim';

import type { IAutobatchPayload } from '../../wire/analysispayload';
import { AUTOBATCH_MIME } from '../renderers';
import { fixture, harness, HOSTILE, type IHarness, mutate, texts } from '../../__tests__/analysisfixtures';

let h: IHarness;

beforeEach(() => {
  h = harness(AUTOBATCH_MIME, { copy: () => undefined });
});

afterEach(() => h.dispose());

function payload(name: string): IAutobatchPayload {
  return fixture(name) as unknown as IAutobatchPayload;
}

describe('autobatch', () => {
  it.each(['autobatch_simulated', 'autobatch_scan'])('%s: cards, trials, badge and YAML', async name => {
    const p = payload(name);
    await h.render(p);
    const node = h.node;
    const value = (kind: string): string =>
      node.querySelector(`.jp-GpuMem-card[data-card="${kind}"] .jp-GpuMem-cardValue`)?.textContent ?? '';
    expect(value('maximum')).toBe(String(p.maximum));
    expect(value('recommended')).toBe(String(p.recommended));
    expect(value('margin')).toBe(`${Math.round(p.margin * 100)}%`);
    expect(value('trials')).toBe(String(p.n_trials));
    expect(node.querySelector('.jp-GpuMem-card[data-card="trials"] .jp-GpuMem-cardDetail')?.textContent).toBe(
      `in ${p.seconds.toFixed(1)} s`
    );
    expect(node.querySelector('.jp-GpuMem-richBadge-simulated')?.textContent).toBe('simulated');

    const rows = [...node.querySelectorAll('.jp-GpuMem-trials tbody tr')];
    expect(rows).toHaveLength(p.trials.length);
    expect(rows.map(r => Number(r.getAttribute('data-batch')))).toEqual(p.trials.map(t => t.batch));
    expect(rows.map(r => texts(r, 'td')[3])).toEqual(p.trials.map(t => (t.ok ? 'ok' : 'OOM')));
    const failed = p.trials.findIndex(t => !t.ok);
    expect(texts(rows[failed], 'td')[7]).toBe(p.trials[failed].error);

    // "Copy as YAML" copies the kernel's text verbatim (its numbers: tests/autobatch/test_autobatch.py)
    const yaml = (p as unknown as { config_yaml: string }).config_yaml;
    expect(node.querySelector('.jp-GpuMem-copyYaml')?.getAttribute('data-yaml')).toBe(yaml);
    expect(yaml).toContain(`\ndata:\n  batch_size: ${p.recommended}\n`);
    expect(texts(node, '.jp-GpuMem-richNotes li')).toEqual(p.notes);
  });

  it('labels a search stopped early and an unbounded one', async () => {
    let data = mutate(payload('autobatch_scan'), 'interrupted', true);
    data = mutate(data, 'at_least', true);
    data = mutate(data, 'engine', 'cuda');
    await h.render(data);
    expect(h.node.querySelector('.jp-GpuMem-richBadge-interrupted')?.textContent).toBe('interrupted');
    expect(h.node.querySelector('.jp-GpuMem-richBadge-simulated')).toBeNull();
    expect(
      h.node.querySelector('.jp-GpuMem-card[data-card="maximum"] .jp-GpuMem-cardValue')?.textContent
    ).toBe(`≥ ${data.maximum}`);
  });

  it.each([
    ['model_name', HOSTILE],
    ['device', HOSTILE],
    ['notes', [HOSTILE]],
    ['trials.1.error', HOSTILE]
  ])('hostile %s is text', async (at, value) => {
    await h.render(mutate(payload('autobatch_simulated'), at, value));
    expect(h.node.querySelector('img')).toBeNull();
    expect(h.node.textContent).toContain(HOSTILE);
  });

  it('data that does not fit → one line', async () => {
    await h.render(mutate(payload('autobatch_simulated'), 'margin', 1));
    expect(h.node.children).toHaveLength(1);
    expect(h.node.textContent).toBe(
      "gpumem: this output's data does not match its schema (autobatch.margin: expected a number from 0 up to (not including) 1, got the number 1)"
    );
  });
});
