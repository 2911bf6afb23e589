/**
 * The stacked bar of the analysis output: what fills the step's device footprint, by category, against the
 * device limit, and what of each table row is alive at the step's peak (the same figures).
 */
import * as React from 'react';

import { size } from './figures';
import type { IAnalysisPayload } from '../../wire/analysispayload';
import type { Trans } from '../../ui/i18n';

/** The stacked bar's figures: what fills the step's device footprint (peak_bytes). */
interface IStackFigures {
  /** Model states: parameters + buffers + gradients + optimizer state. */
  readonly states: number;
  readonly activations: number;
  readonly input: number;
  /** cuBLAS + cuDNN workspaces, inside peak reserved. */
  readonly workspace: number;
  /** The rest of peak reserved: temporaries, the autocast cache and the allocator's rounding. */
  readonly other: number;
  readonly context: number;
}

/**
 * The bar's figures: the categories alive at the peak (breakdown_at_peak) when the payload has them, else
 * (older outputs) the whole-step sizes; then the workspace, the rest of peak reserved and the CUDA context.
 */
function stackFigures(payload: IAnalysisPayload): IStackFigures {
  const b = payload.breakdown_at_peak;
  const states = b
    ? b.parameter + b.buffer + b.gradient + b.optimizer_state
    : payload.parameters_bytes + payload.buffers_bytes + payload.gradients_bytes + payload.optimizer_bytes;
  const activations = b ? b.activation : payload.activations_bytes;
  const input = b ? b.input : payload.input_bytes;
  const reserved = payload.peak_reserved_bytes ?? payload.peak_allocated_bytes;
  const context = Math.max(0, payload.peak_bytes - reserved);
  const inReserved = Math.max(0, payload.peak_bytes - context);
  const workspace = Math.min(payload.workspace_bytes, Math.max(0, inReserved - states - activations - input));
  const other = Math.max(0, inReserved - states - activations - input - workspace);
  return { states, activations, input, workspace, other, context };
}

/**
 * What is alive at the step's peak, by table row: the stacked bar's figures split as the table splits them, so
 * the bar and the table's "At the peak" column cannot disagree. Null for outputs without a breakdown.
 */
export function peakComposition(payload: IAnalysisPayload): Readonly<Record<string, number>> | null {
  const b = payload.breakdown_at_peak;
  if (!b) {
    return null;
  }
  const bar = stackFigures(payload);
  return {
    parameters: b.parameter,
    buffers: b.buffer,
    gradients: b.gradient,
    optimizer: b.optimizer_state,
    states: bar.states,
    activations: bar.activations,
    input: bar.input,
    autocast_cache: b.autocast_cache,
    temporaries: b.temporary,
    workspace: bar.workspace,
    context: bar.context
  };
}

export type StackKey = 'states' | 'activations' | 'input' | 'workspace' | 'other' | 'context' | 'free';

export interface IStackSegment {
  readonly key: StackKey;
  readonly label: string;
  readonly bytes: number;
}

/**
 * The stacked bar: what fills the step's device footprint (peak_bytes), then what is left of the usable memory.
 * Categories are those alive at the peak when the trace has them (the table's "At the peak" column shows the
 * same figures); "other" is temporaries, the autocast cache and the allocator's rounding (the rest of peak
 * reserved).
 */
export function stackSegments(payload: IAnalysisPayload, trans: Trans): IStackSegment[] {
  const bar = stackFigures(payload);
  const segments: IStackSegment[] = [
    { key: 'states', label: trans.__('model states'), bytes: bar.states },
    { key: 'activations', label: trans.__('activations'), bytes: bar.activations },
    { key: 'input', label: trans.__('input'), bytes: bar.input },
    { key: 'workspace', label: trans.__('workspace'), bytes: bar.workspace },
    { key: 'other', label: trans.__('temporaries, autocast & rounding'), bytes: bar.other },
    { key: 'context', label: trans.__('CUDA context'), bytes: bar.context }
  ];
  const limit = payload.device.limit_bytes;
  const used = segments.reduce((sum, s) => sum + s.bytes, 0);
  if (limit !== null) {
    segments.push({ key: 'free', label: trans.__('free'), bytes: Math.max(0, limit - used) });
  }
  return segments;
}

/** The bar's caption: whose figures it stacks (alive at the peak, or the whole step for older outputs). */
export function stackCaption(payload: IAnalysisPayload, trans: Trans): string {
  const limit = payload.device.limit_bytes;
  const footprint =
    limit !== null
      ? trans.__('step footprint %1 of %2 usable', size(payload.peak_bytes), size(limit))
      : trans.__('step footprint %1 (no device limit)', size(payload.peak_bytes));
  return payload.breakdown_at_peak
    ? trans.__('Alive at the peak (%1): %2', payload.peak_phase ?? trans.__('step'), footprint)
    : trans.__('Step sizes: %1', footprint);
}

export function StackedBar(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element {
  const { payload, trans } = props;
  const segments = stackSegments(payload, trans);
  const limit = payload.device.limit_bytes;
  const total = segments.reduce((sum, s) => sum + s.bytes, 0);
  const scale = Math.max(total, limit ?? 0, 1);
  const W = 480;
  let x = 0;
  const over = limit !== null && payload.peak_bytes > limit;
  return (
    <figure className="jp-GpuMem-stack">
      <figcaption className="jp-GpuMem-chartCaption">{stackCaption(payload, trans)}</figcaption>
      <svg
        className="jp-GpuMem-stackSvg"
        viewBox={`0 0 ${W} 18`}
        width="100%"
        preserveAspectRatio="none"
        role="img"
        aria-label={trans.__('Memory of the step against the device limit')}
      >
        {segments.map(s => {
          const w = (s.bytes / scale) * W;
          const rect = (
            <rect
              key={s.key}
              className={`jp-GpuMem-stackSeg jp-GpuMem-stack-${s.key}`}
              data-segment={s.key}
              x={x.toFixed(2)}
              y={0}
              width={w.toFixed(2)}
              height={18}
            >
              <title>{`${s.label}: ${size(s.bytes)}`}</title>
            </rect>
          );
          x += w;
          return rect;
        })}
        {limit !== null && over && (
          <line
            className="jp-GpuMem-stackLimit"
            x1={(limit / scale) * W}
            x2={(limit / scale) * W}
            y1={0}
            y2={18}
          />
        )}
      </svg>
      <ul className="jp-GpuMem-chartLegend">
        {segments.map(s => (
          <li key={s.key} className="jp-GpuMem-chartLegendItem">
            <span className={`jp-GpuMem-stackSwatch jp-GpuMem-stack-${s.key}`} />
            <span>{`${s.label} ${size(s.bytes)}`}</span>
          </li>
        ))}
      </ul>
    </figure>
  );
}
