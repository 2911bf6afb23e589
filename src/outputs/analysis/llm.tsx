/**
 * The language-model sections of the analysis output: the logits and loss line (vocabulary × sequence ×
 * batch, the float32 copy), the attention implementation, what gradient checkpointing wrapped and a LoRA / QLoRA
 * plan's quantised weights, adapters and dequantisation transients, from the payload's `llm` and `figures`; and the
 * longest sequence that fits at each batch (`--search seq`, the payload's `sequence_search`) with its picks,
 * captioned by the batch picks' rule (../picks.ts), and the length up to which every length fits where a shorter
 * length needs more memory than the longest.
 *
 * The wording follows the kernel's text report (gpumem_kernel/analysis/llm_render.py, render.py's fine-tune rows).
 * Both sections are absent from payloads without them, and from outputs saved before the kernel wrote them.
 */
import * as React from 'react';

import { figure, size } from './figures';
import { RichBadge, TextList } from '../kit';
import { sequencePickCaption } from '../picks';
import type {
  IAnalysisLlmLogits,
  IAnalysisPayload,
  IAnalysisSequenceSearch,
  IAnalysisSequenceSearchResults
} from '../../wire/analysispayload';
import { formatCount, NOT_MEASURED } from '../../ui/format';
import type { Trans } from '../../ui/i18n';

/**
 * "vocab 32,000 × seq 128 × batch 2 (8.2M values): logits 15.6 MiB bfloat16 (lm_head output) + 31.3 MiB float32
 * copy (the loss's upcast) + …; 109 MiB alive at once, 109 MiB at the step's peak; backward 78.1 MiB more,
 * transient": the parts the trace saw, in the order the step makes them.
 */
export function logitsText(logits: IAnalysisLlmLogits, trans: Trans): string {
  const values = logits.vocab * logits.seq * logits.batch;
  const parts = [trans.__('logits %1 %2 (lm_head output)', size(logits.logits_bytes), logits.dtype)];
  if (logits.upcast_bytes) {
    parts.push(trans.__("%1 float32 copy (the loss's upcast)", size(logits.upcast_bytes)));
  }
  if (logits.log_softmax_bytes) {
    parts.push(trans.__('%1 log-softmax (cross-entropy)', size(logits.log_softmax_bytes)));
  }
  if (logits.other_bytes) {
    parts.push(trans.__('%1 other copies (shifts, soft-capping)', size(logits.other_bytes)));
  }
  const head = trans.__(
    'vocab %1 × seq %2 × batch %3 (%4M values)',
    formatCount(logits.vocab),
    formatCount(logits.seq),
    formatCount(logits.batch),
    (values / 1e6).toFixed(1)
  );
  const held = trans.__(
    "%1 alive at once, %2 at the step's peak; backward %3 more, transient",
    size(logits.held_bytes),
    size(logits.at_peak_bytes),
    size(logits.backward_bytes)
  );
  return `${head}: ${parts.join(' + ')}; ${held}`;
}

// a PEFT plan's figures (LoRA, QLoRA, DoRA, IA3, ...: gpumem_kernel/analysis/model/fine_tune.py), each inside the breakdown's rows
const FINE_TUNE = ['quantised_weights', 'adapters', 'dequant_transient'] as const;

function fineTuneLabel(name: (typeof FINE_TUNE)[number], trans: Trans): string {
  switch (name) {
    case 'quantised_weights':
      return trans.__('Quantised');
    case 'adapters':
      // any PEFT method (LoRA, DoRA, IA3, prompt tuning, ...): the figure's note names it
      return trans.__('Adapters');
    case 'dequant_transient':
      return trans.__('Dequantisation');
  }
}

export interface ILlmRow {
  readonly key: string;
  readonly label: string;
  readonly value: string;
}

/** The rows of the "Language model" table, in the text report's order; [] without any. */
export function llmRows(payload: IAnalysisPayload, trans: Trans): ILlmRow[] {
  const rows: ILlmRow[] = [];
  const llm = payload.llm;
  if (llm) {
    if (llm.attention) {
      rows.push({
        key: 'attention',
        label: trans.__('Attention'),
        value: trans.__('%1 (config._attn_implementation)', llm.attention)
      });
    }
    if (llm.attention_path) {
      // the path the trace took (a 4-D mask or none, K/V expanded or not); absent from older payloads
      rows.push({
        key: 'attention-path',
        label: trans.__('Attention path'),
        value: trans.__('%1 (as traced)', llm.attention_path)
      });
    }
    const wrapped = llm.checkpointing;
    if (wrapped) {
      const value = trans.__('%1 %2 (%3)', wrapped.blocks, wrapped.kind, wrapped.names);
      rows.push({ key: 'checkpointing', label: trans.__('Checkpointing'), value });
    } else if (payload.settings.checkpointing) {
      const value = trans.__('asked, but no repeated blocks found: traced without it');
      rows.push({ key: 'checkpointing', label: trans.__('Checkpointing'), value });
    }
    if (llm.logits) {
      rows.push({ key: 'logits', label: trans.__('Logits & loss'), value: logitsText(llm.logits, trans) });
    }
  }
  for (const name of FINE_TUNE) {
    const f = figure(payload, name);
    if (f && f.bytes !== null) {
      rows.push({ key: name, label: fineTuneLabel(name, trans), value: `${size(f.bytes)} (${f.note})` });
    }
  }
  return rows;
}

/** `<table class="jp-GpuMem-llm">`: the logits and loss, attention, checkpointing and LoRA / QLoRA lines. */
export function LanguageModelTable(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element | null {
  const { payload, trans } = props;
  const rows = llmRows(payload, trans);
  if (rows.length === 0) {
    return null;
  }
  return (
    <div className="jp-GpuMem-llmSection">
      <table className="jp-GpuMem-richTable jp-GpuMem-llm">
        <caption>{payload.llm ? trans.__('Language model') : trans.__('Fine-tuning')}</caption>
        <tbody>
          {rows.map(row => (
            <tr key={row.key} data-row={row.key}>
              <th scope="row">{row.label}</th>
              <td>{row.value}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <TextList className="jp-GpuMem-richNotes" items={payload.llm?.notes ?? []} />
    </div>
  );
}

/** "64 tokens (default)", "128 tokens (JupyterLab setting)", "32 tokens (--seq-multiple)". */
export function multipleText(search: IAnalysisSequenceSearch, trans: Trans): string {
  switch (search.multiple_source) {
    case 'option':
      return trans.__('%1 tokens (--seq-multiple)', search.multiple);
    case 'setting':
      return trans.__('%1 tokens (JupyterLab setting)', search.multiple);
    default:
      return trans.__('%1 tokens (default)', search.multiple);
  }
}

function tokens(n: number | null): string {
  return n === null ? NOT_MEASURED : formatCount(n);
}

function PickCell(props: {
  payload: IAnalysisPayload;
  search: IAnalysisSequenceSearch;
  result: IAnalysisSequenceSearchResults;
  pick: 'recommended' | 'safe';
  trans: Trans;
}): JSX.Element {
  const { payload, search, result, pick, trans } = props;
  const caption = sequencePickCaption(payload, result, search.multiple, pick, trans);
  return (
    <td data-column={pick}>
      <span className="jp-GpuMem-num">{tokens(result[pick])}</span>
      {caption !== null && <div className="jp-GpuMem-richNote">{caption}</div>}
    </td>
  );
}

/**
 * "every length fits up to 96 tokens" under the longest, when a shorter length needs more memory than the longest
 * (the caching allocator's segments): with variable lengths that is the limit, and the picks are taken below it.
 */
function EveryLength(props: { result: IAnalysisSequenceSearchResults; trans: Trans }): JSX.Element | null {
  const { result, trans } = props;
  const every = result.variable?.every_length ?? null;
  if (every === null || result.maximum === null || every >= result.maximum) {
    return null;
  }
  return (
    <div className="jp-GpuMem-richNote" data-role="every-length">
      {trans.__('every length fits up to %1 tokens', formatCount(every))}
    </div>
  );
}

/** `<table class="jp-GpuMem-sequence">`: the longest sequence at each batch, with the recommended and safe picks. */
export function SequenceTable(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element | null {
  const { payload, trans } = props;
  const search = payload.sequence_search;
  if (!search) {
    return null;
  }
  return (
    <table className="jp-GpuMem-richTable jp-GpuMem-sequence">
      <caption>
        {trans.__('Longest sequence, in multiples of %1', multipleText(search, trans))}
        {search.context !== null &&
          ` · ${trans.__("the model's context: %1 positions", formatCount(search.context))}`}
      </caption>
      <thead>
        <tr>
          <th className="jp-GpuMem-num">{trans.__('Batch')}</th>
          <th className="jp-GpuMem-num">{trans.__('Longest')}</th>
          <th>{trans.__('Recommended')}</th>
          <th>{trans.__('Safe')}</th>
          <th>{trans.__('Note')}</th>
        </tr>
      </thead>
      <tbody>
        {search.results.map(result => (
          <tr key={result.batch} data-batch={result.batch}>
            <td className="jp-GpuMem-num">{result.batch}</td>
            <td className="jp-GpuMem-num" data-column="maximum">
              {tokens(result.maximum)}
              {result.extrapolated && <RichBadge kind="extrapolated">{trans.__('extrapolated')}</RichBadge>}
              <EveryLength result={result} trans={trans} />
            </td>
            <PickCell payload={payload} search={search} result={result} pick="recommended" trans={trans} />
            <PickCell payload={payload} search={search} result={result} pick="safe" trans={trans} />
            <td className="jp-GpuMem-richNote" data-column="note">
              {result.note}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
