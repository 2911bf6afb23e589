/**
 * "Copy as YAML": the picked configuration in the seeds' training-config shape
 *
 * ```yaml
 * data:
 *   batch_size: 136
 *   num_workers: 4        # benchmark only
 *   pin_memory: true      # benchmark only
 * training:
 *   gradient_accumulation_steps: 16
 *   use_amp: true
 *   amp_dtype: float16
 * ```
 *
 * written with the `yaml` package (so the text always parses back), with comments saying where each number
 * came from. Strings from the kernel (model and device names) only ever reach comments, flattened to one line.
 */
import { Document, isScalar } from 'yaml';

import type {
  IAnalysisPayload,
  IAutobatchPayload,
  IBenchmarkPayload,
  PickKind
} from '../wire/analysispayload';
import { formatBytes } from '../ui/format';

/** The AMP dtype names PyTorch and the seeds' configs use. */
const AMP_DTYPE: Readonly<Record<'fp16' | 'bf16', string>> = { fp16: 'float16', bf16: 'bfloat16' };

/** One line, without control characters (comments must not break out of their line). */
function oneLine(text: string, max = 120): string {
  // eslint-disable-next-line no-control-regex
  const flat = text.replace(/[\u0000-\u001f\u007f\u2028\u2029]+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

type Path = ReadonlyArray<string>;

interface IEntry {
  readonly path: Path;
  readonly value: number | boolean | string;
  readonly comment?: string;
}

function build(header: ReadonlyArray<string>, entries: ReadonlyArray<IEntry>): string {
  const tree: Record<string, Record<string, number | boolean | string>> = {};
  for (const { path, value } of entries) {
    const [section, key] = path;
    tree[section] = { ...(tree[section] ?? {}), [key]: value };
  }
  const doc = new Document(tree);
  if (header.length > 0) {
    doc.commentBefore = header.map(line => ` ${oneLine(line)}`).join('\n');
  }
  for (const { path, comment } of entries) {
    const node = doc.getIn(path, true);
    if (comment && isScalar(node)) {
      node.comment = ` ${oneLine(comment)}`;
    }
  }
  return doc.toString({ lineWidth: 0 });
}

/** The micro-batch the kernel's accumulation steps refer to: a pick above an explicit target is capped to it. */
export function microBatch(payload: IAnalysisPayload, pick: number | null): number | null {
  const acc = payload.recommendations.accumulation;
  if (!pick) {
    return null;
  }
  return acc.explicit_target ? Math.min(pick, acc.target_effective_batch) : pick;
}

/** The numbers the analysis YAML carries (also what the tests compare with the payload). */
export interface IAnalysisConfig {
  readonly batchSize: number;
  readonly accumulationSteps: number;
  readonly useAmp: boolean;
  readonly ampDtype: string | null;
  readonly checkpointing: boolean;
  /** true when the batch is the recommended pick, false when it falls back to the analysed batch */
  readonly recommended: boolean;
}

/** The configuration "Copy as YAML" writes for an analysis: the recommended pick, or the analysed batch. */
export function analysisConfig(payload: IAnalysisPayload): IAnalysisConfig {
  const recs = payload.recommendations;
  const settings = payload.settings;
  const batch = microBatch(payload, recs.recommended);
  const steps = recs.accumulation.recommended;
  const amp = settings.amp;
  if (batch !== null && steps !== null && steps >= 1) {
    return {
      batchSize: batch,
      accumulationSteps: steps,
      useAmp: amp !== null,
      ampDtype: amp === null ? null : AMP_DTYPE[amp],
      checkpointing: settings.checkpointing,
      recommended: true
    };
  }
  return {
    batchSize: settings.batch_size,
    accumulationSteps: settings.grad_accum,
    useAmp: amp !== null,
    ampDtype: amp === null ? null : AMP_DTYPE[amp],
    checkpointing: settings.checkpointing,
    recommended: false
  };
}

function where(payload: IAnalysisPayload): string {
  const device = payload.device;
  return device.source === 'none' ? 'no device limit' : `${device.name ?? 'device'} (${device.source})`;
}

/** "Copy as YAML" of an analysis. */
export function analysisYaml(payload: IAnalysisPayload): string {
  const recs = payload.recommendations;
  const config = analysisConfig(payload);
  const bound = Math.round(payload.error_bound.relative * 100);
  const header = [
    `gpumem analysis of ${payload.model.name}: ${payload.engine}, ±${bound}%, ${where(payload)}`,
    recs.maximum !== null
      ? `maximum ${recs.maximum}, recommended ${recs.recommended ?? 'n/a'}, safe ${recs.safe ?? 'n/a'} (${recs.rounding})` +
        (recs.extrapolated ? ', maximum extrapolated' : '')
      : `no batch recommendation: ${recs.note || 'no device limit'}`
  ];
  if (recs.lr.to_effective_batch !== null && recs.lr.linear !== null && recs.lr.linear !== 1) {
    header.push(
      `learning rate: x${recs.lr.linear.toPrecision(3)} (linear rule) or x${(recs.lr.sqrt ?? 1).toPrecision(3)} (square-root rule), with warm-up`
    );
  }
  const effective = config.batchSize * config.accumulationSteps;
  const entries: IEntry[] = [
    {
      path: ['data', 'batch_size'],
      value: config.batchSize,
      comment: config.recommended
        ? recs.recommended !== null && config.batchSize < recs.recommended
          ? `recommended ${recs.recommended}, capped at the target effective batch`
          : 'recommended'
        : 'as analysed (no recommendation)'
    },
    {
      path: ['training', 'gradient_accumulation_steps'],
      value: config.accumulationSteps,
      comment: `effective batch ${effective}`
    },
    { path: ['training', 'use_amp'], value: config.useAmp }
  ];
  if (config.ampDtype !== null) {
    entries.push({ path: ['training', 'amp_dtype'], value: config.ampDtype });
  }
  entries.push({ path: ['training', 'gradient_checkpointing'], value: config.checkpointing });
  return build(header, entries);
}

/** "Copy as YAML" of an auto batch size search. */
export function autobatchYaml(payload: IAutobatchPayload): string {
  const header = [
    `gpumem autobatch of ${payload.model_name}: ${payload.engine === 'simulated' ? 'simulated' : 'measured'} on ${payload.device}` +
      (payload.limit_bytes !== null ? `, limit ${formatBytes(payload.limit_bytes, 'auto')}` : ''),
    `maximum ${payload.at_least ? 'at least ' : ''}${payload.maximum}, recommended ${payload.recommended} ` +
      `(${Math.round(payload.margin * 100)}% margin, ${payload.rounding})` +
      (payload.interrupted ? ', interrupted' : '')
  ];
  const entries: IEntry[] = [
    { path: ['data', 'batch_size'], value: payload.recommended, comment: `maximum ${payload.maximum}` },
    { path: ['training', 'use_amp'], value: payload.amp !== null }
  ];
  if (payload.amp !== null) {
    entries.push({ path: ['training', 'amp_dtype'], value: AMP_DTYPE[payload.amp] });
  }
  return build(header, entries);
}

/** "Copy as YAML" of a benchmark pick (the recommended one by default); null when there is no such pick. */
export function benchmarkYaml(payload: IBenchmarkPayload, kind: PickKind = 'recommended'): string | null {
  const pick = payload.picks[kind];
  if (pick === null) {
    return null;
  }
  const header = [
    `gpumem benchmark of ${payload.model.name}, ${kind.replace('_', ' ')}: ${payload.engine} on ${payload.device.name}`,
    `${pick.samples_per_s.toFixed(1)} samples/s` +
      (pick.peak_bytes !== null ? `, peak ${formatBytes(pick.peak_bytes, 'auto')}` : '') +
      (payload.interrupted ? ' (interrupted sweep)' : '')
  ];
  const entries: IEntry[] = [
    { path: ['data', 'batch_size'], value: pick.batch_size },
    { path: ['data', 'num_workers'], value: pick.num_workers },
    { path: ['data', 'pin_memory'], value: pick.pin_memory },
    { path: ['training', 'use_amp'], value: pick.amp }
  ];
  if (pick.amp) {
    entries.push({ path: ['training', 'amp_dtype'], value: payload.amp_dtype });
  }
  return build(header, entries);
}

/**
 * Python for gradient accumulation at the recommended pick ("Insert code"). Only numbers from the payload
 * reach the code: names (the user's own strings) could otherwise break out of a comment.
 */
export function accumulationCode(payload: IAnalysisPayload): string | null {
  const config = analysisConfig(payload);
  if (!config.recommended || config.accumulationSteps < 2) {
    return null;
  }
  const steps = config.accumulationSteps;
  const amp = payload.settings.amp;
  const lines = [
    `# Gradient accumulation (gpumem): ${steps} micro-batches of ${config.batchSize} = effective batch ${
      steps * config.batchSize
    }`,
    '# Assumes model, optimizer, criterion and train_dataset are defined; adjust the names to yours.',
    'import torch',
    'from torch.utils.data import DataLoader',
    '',
    `batch_size = ${config.batchSize}`,
    `accumulation_steps = ${steps}`,
    'train_loader = DataLoader(train_dataset, batch_size=batch_size, shuffle=True, drop_last=True)',
    'device = next(model.parameters()).device'
  ];
  if (amp === 'fp16') {
    lines.push('scaler = torch.amp.GradScaler(device.type)');
  }
  lines.push('', 'model.train()', 'optimizer.zero_grad(set_to_none=True)');
  lines.push('for step, (inputs, targets) in enumerate(train_loader):');
  lines.push(
    '    inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)'
  );
  if (amp !== null) {
    lines.push(`    with torch.autocast(device_type=device.type, dtype=torch.${AMP_DTYPE[amp]}):`);
    lines.push('        loss = criterion(model(inputs), targets) / accumulation_steps');
  } else {
    lines.push('    loss = criterion(model(inputs), targets) / accumulation_steps');
  }
  lines.push(amp === 'fp16' ? '    scaler.scale(loss).backward()' : '    loss.backward()');
  lines.push('    if (step + 1) % accumulation_steps == 0:');
  if (amp === 'fp16') {
    lines.push('        scaler.step(optimizer)', '        scaler.update()');
  } else {
    lines.push('        optimizer.step()');
  }
  lines.push('        optimizer.zero_grad(set_to_none=True)');
  return lines.join('\n') + '\n';
}
