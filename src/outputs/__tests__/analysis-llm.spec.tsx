/**
 * @jest-environment jsdom
 * @jest-environment-options {"customExportConditions": ["node", "node-addons"]}
 *
 * `%gpumem analyze hf:… --seq 128 --checkpointing --quantize nf4 --lora r=8 --search seq` in the
 * browser: the logits and loss line with its size, the attention implementation, what checkpointing
 * wrapped, the QLoRA lines, and the longest sequence at batches 1 and 4 with its picks, on the payload the kernel
 * wrote for a 2-layer Llama config with a 32,000-token vocabulary (scripts/make_renderer_fixtures.py).
 */
import '../../__tests__/domshim';

import { ANALYSIS_MIME } from '../renderers';
import { size } from '../analysis/figures';
import { fixture, harness, HOSTILE, type IHarness, mutate, texts } from '../../__tests__/analysisfixtures';

let h: IHarness;

afterEach(() => {
  h?.dispose();
});

async function show(data: unknown): Promise<HTMLElement> {
  h = harness(ANALYSIS_MIME);
  await h.render(data);
  return h.node;
}

function row(node: HTMLElement, key: string): string {
  return node.querySelector(`.jp-GpuMem-llm tr[data-row="${key}"] td`)?.textContent ?? '';
}

describe('analysis: the language model', () => {
  it('shows the logits and loss line with vocabulary × sequence × batch and the float32 copy', async () => {
    const node = await show(fixture('analysis_llm'));
    expect(node.querySelector('.jp-GpuMem-invalid')).toBeNull();
    expect(node.querySelector('.jp-GpuMem-llm caption')?.textContent).toBe('Language model');
    expect(row(node, 'logits')).toBe(
      'vocab 32,000 × seq 128 × batch 2 (8.2M values): ' +
        `logits ${size(16384000)} bfloat16 (lm_head output) + ${size(32768000)} float32 copy (the loss's upcast) + ` +
        `${size(32768000)} log-softmax (cross-entropy); ${size(114688000)} alive at once, ` +
        `${size(114688000)} at the step's peak; backward ${size(81920000)} more, transient`
    );
    expect(size(16384000)).toBe('15.6 MiB');
  });

  it('names the attention implementation and the blocks checkpointing wrapped', async () => {
    const node = await show(fixture('analysis_llm'));
    expect(row(node, 'attention')).toBe('sdpa (config._attn_implementation)');
    expect(row(node, 'checkpointing')).toBe('2 LlamaDecoderLayer (base_model.model.model.layers.0-1)');
  });

  it('names the attention path the trace took, and shows none for a payload without it', async () => {
    const path = 'SDPA with a 4-D mask, K/V expanded';
    const node = await show(mutate(fixture('analysis_llm'), 'llm.attention_path', path));
    expect(row(node, 'attention-path')).toBe(`${path} (as traced)`);
    expect(texts(node, '.jp-GpuMem-llm th').slice(0, 3)).toEqual([
      'Attention',
      'Attention path',
      'Checkpointing'
    ]);
    const older = await show(fixture('analysis_llm'));
    expect(older.querySelector('.jp-GpuMem-llm tr[data-row="attention-path"]')).toBeNull();
  });

  it("lists a QLoRA plan's quantised weights, adapters and dequantisation transients as separate lines", async () => {
    const node = await show(fixture('analysis_llm'));
    expect(texts(node, '.jp-GpuMem-llm th')).toEqual([
      'Attention',
      'Checkpointing',
      'Logits & loss',
      'Quantised',
      'Adapters',
      'Dequantisation'
    ]);
    expect(row(node, 'quantised_weights')).toBe(
      `${size(53360)} (14 layers, nf4: packed weights and quant state (in parameters and buffers))`
    );
    expect(row(node, 'adapters')).toContain(`${size(114688)} (LoRA: `);
    expect(row(node, 'dequant_transient')).toContain('one layer at a time (model.layers.0.mlp.gate_proj)');
  });

  it("labels another PEFT method's adapters by their note, not as LoRA", async () => {
    const payload = fixture('analysis_llm') as { figures: Array<{ name: string; note: string }> };
    const figures = payload.figures.map(f =>
      f.name === 'adapters' ? { ...f, note: 'IA3: 1.2 KiB parameters + 1.2 KiB gradients' } : f
    );
    const node = await show(mutate(payload, 'figures', figures));
    expect(texts(node, '.jp-GpuMem-llm th')).toContain('Adapters');
    expect(texts(node, '.jp-GpuMem-llm th').join(' ')).not.toContain('LoRA');
    expect(row(node, 'adapters')).toContain('(IA3: 1.2 KiB parameters');
  });

  it('says when checkpointing was asked for but found no blocks, and shows nothing for a model without facts', async () => {
    const none = await show(mutate(fixture('analysis_llm'), 'llm.checkpointing', null));
    expect(row(none, 'checkpointing')).toBe('asked, but no repeated blocks found: traced without it');
    h.dispose();
    const plain = await show(fixture('analysis_target'));
    expect(plain.querySelector('.jp-GpuMem-llm')).toBeNull();
    expect(plain.querySelector('.jp-GpuMem-sequence')).toBeNull();
    h.dispose();
    // saved before the kernel wrote these sections
    let old = mutate(fixture('analysis_llm'), 'llm', undefined);
    old = mutate(old, 'sequence_search', undefined);
    old = mutate(old, 'figures', []);
    const older = await show(old);
    expect(older.querySelector('.jp-GpuMem-invalid')).toBeNull();
    expect(older.querySelector('.jp-GpuMem-llm')).toBeNull();
    expect(older.querySelector('.jp-GpuMem-sequence')).toBeNull();
  });

  it('renders kernel strings as text', async () => {
    const node = await show(mutate(fixture('analysis_llm'), 'llm.attention', HOSTILE));
    expect(row(node, 'attention')).toBe(`${HOSTILE} (config._attn_implementation)`);
    expect(node.querySelector('.jp-GpuMem-llm img')).toBeNull();
  });
});

describe('analysis: the longest sequence (--search seq)', () => {
  it('shows the longest, recommended and safe sequence at each batch, captioned as the batch picks are', async () => {
    const node = await show(fixture('analysis_llm'));
    const table = node.querySelector('.jp-GpuMem-sequence');
    expect(table?.querySelector('caption')?.textContent).toBe(
      "Longest sequence, in multiples of 64 tokens (default) · the model's context: 256 positions"
    );
    const cell = (batch: number, column: string): string =>
      table?.querySelector(`tr[data-batch="${batch}"] td[data-column="${column}"]`)?.textContent ?? '';
    const caption = (batch: number, column: string): string =>
      table?.querySelector(`tr[data-batch="${batch}"] td[data-column="${column}"] .jp-GpuMem-richNote`)
        ?.textContent ?? '';
    expect(cell(1, 'maximum')).toBe('1,984');
    expect(cell(1, 'recommended')).toBe('1,152' + caption(1, 'recommended'));
    expect(caption(1, 'recommended')).toBe(
      '58% of the maximum 1984; aim 60%, rounded down to a multiple of 64'
    );
    expect(caption(1, 'safe')).toBe('39% of the maximum 1984; aim 40%, rounded down to a multiple of 64');
    expect(cell(1, 'safe')).toMatch(/^768/);
    expect(cell(1, 'note')).toBe("over the model's context of 256 positions");
    expect([cell(4, 'maximum'), cell(4, 'recommended'), cell(4, 'safe')]).toEqual([
      '512',
      '256' + caption(4, 'recommended'),
      '192' + caption(4, 'safe')
    ]);
    expect(caption(4, 'safe')).toBe('38% of the maximum 512; aim 40%, rounded down to a multiple of 64');
  });

  it('says up to which length every length fits when a shorter one needs more, and captions the picks below it', async () => {
    // the kernel's batch-1 search on the same model, where 1,792 tokens reserve more than 1,856
    const checked = {
      peak_bytes: 1199570944,
      allocated_bytes: 535484928,
      checked: [64, 128, 256, 384, 448, 512, 1024, 1088, 1152, 1792, 1856, 1920, 1984],
      extra_traces: 6,
      complete: true
    };
    const dip = { shorter: 1792, longer: 1856, shorter_bytes: 1610612736, longer_bytes: 1530920960 };
    let data = mutate(fixture('analysis_llm'), 'sequence_search.results.0.variable', {
      ...checked,
      every_length: 1088,
      dip
    });
    data = mutate(data, 'sequence_search.results.0.recommended', 640);
    data = mutate(data, 'sequence_search.results.0.safe', 384);
    const note =
      "over the model's context of 256 positions; 1,792 tokens need 5.2 % more than 1,856: " +
      'with variable lengths the limit is 1,088';
    data = mutate(data, 'sequence_search.results.0.note', note);
    data = mutate(data, 'sequence_search.results.1.variable', { ...checked, every_length: 512, dip: null });
    const node = await show(data);
    expect(node.querySelector('.jp-GpuMem-invalid')).toBeNull();
    const at = (batch: number, column: string): string =>
      `.jp-GpuMem-sequence tr[data-batch="${batch}"] td[data-column="${column}"]`;
    const text = (selector: string): string => node.querySelector(selector)?.textContent ?? '';

    expect(text(at(1, 'maximum'))).toBe('1,984every length fits up to 1,088 tokens');
    expect(text(`${at(1, 'maximum')} [data-role="every-length"]`)).toBe(
      'every length fits up to 1,088 tokens'
    );
    expect(text(`${at(1, 'recommended')} .jp-GpuMem-richNote`)).toBe(
      '59% of 1088, the length up to which every length fits; aim 60%, rounded down to a multiple of 64'
    );
    expect(text(`${at(1, 'safe')} .jp-GpuMem-richNote`)).toBe(
      '35% of 1088, the length up to which every length fits; aim 40%, rounded down to a multiple of 64'
    );
    expect(text(at(1, 'note'))).toBe(note);
    // batch 4: every length up to the longest fits, so nothing more is said
    expect(node.querySelector(`${at(4, 'maximum')} [data-role="every-length"]`)).toBeNull();
    expect(text(`${at(4, 'safe')} .jp-GpuMem-richNote`)).toBe(
      '38% of the maximum 512; aim 40%, rounded down to a multiple of 64'
    );
  });

  it('words the multiple by where it came from, and a search without a device limit', async () => {
    let data = mutate(fixture('analysis_llm'), 'sequence_search.multiple_source', 'setting');
    data = mutate(data, 'sequence_search.multiple', 128);
    data = mutate(data, 'sequence_search.results.0.maximum', null);
    data = mutate(data, 'sequence_search.results.0.recommended', null);
    data = mutate(data, 'sequence_search.results.0.safe', null);
    const node = await show(data);
    expect(node.querySelector('.jp-GpuMem-sequence caption')?.textContent).toContain(
      'in multiples of 128 tokens (JupyterLab setting)'
    );
    const row1 = '.jp-GpuMem-sequence tr[data-batch="1"]';
    expect(texts(node, `${row1} td[data-column]`).slice(0, 3)).toEqual(['n/a', 'n/a', 'n/a']);
  });
});
