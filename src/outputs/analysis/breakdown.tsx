/**
 * The breakdown tables of the analysis output: the memory of one training step by category (its size, what of
 * it is alive at the peak, the engine, a note) with the peak totals, and the per-rank figures of a distributed
 * run, labelled with where they come from (traced or the formula fallback). The rows follow the text report
 * (gpumem_kernel/analysis/render.py).
 */
import * as React from 'react';

import { engineLabel, figure, size } from './figures';
import { peakComposition } from './stack';
import type { FigureEngine, IAnalysisPayload, IDistributed } from '../../wire/analysispayload';
import type { Trans } from '../../ui/i18n';

export interface IBreakdownRow {
  readonly key: string;
  readonly label: string;
  /** The category's size in the step (what the text report lists). */
  readonly bytes: number | null;
  /** What of it is alive at the step's peak: the stacked bar's figure (null without a breakdown). */
  readonly atPeak: number | null;
  readonly engine: FigureEngine | 'n/a';
  readonly note: string;
  /** A subtotal of the rows above it (model states). */
  readonly subtotal?: boolean;
}

/**
 * The rows of the breakdown table: model memory (parameters, buffers, gradients, optimizer state), then
 * batch memory, in the order of the text report (gpumem_kernel/analysis/render.py).
 */
export function breakdownRows(payload: IAnalysisPayload, trans: Trans): IBreakdownRow[] {
  const peak = peakComposition(payload);
  const atPeak = (key: string): number | null => peak?.[key] ?? null;
  const fromFigure = (
    key: string,
    name: string,
    label: string,
    bytes: number,
    fallbackNote = ''
  ): IBreakdownRow => {
    const f = figure(payload, name);
    return {
      key,
      label,
      bytes,
      atPeak: atPeak(key),
      engine: f?.engine ?? payload.engine,
      note: f?.note || fallbackNote
    };
  };
  const cublas = figure(payload, 'cublas_workspace');
  const cudnn = figure(payload, 'cudnn_workspace');
  const workspaceEngine: FigureEngine =
    cudnn && cudnn.bytes ? cudnn.engine : cublas ? cublas.engine : 'estimate';
  const context = figure(payload, 'context');
  const contextNote: Record<IAnalysisPayload['device']['context_source'], string> = {
    estimate: trans.__('estimate by GPU generation'),
    nvml: trans.__('measured by NVML, already in use'),
    'in use': trans.__('already in use'),
    none: trans.__('no GPU')
  };
  const optimizer = fromFigure(
    'optimizer',
    'optimizer',
    trans.__('Optimizer state'),
    payload.optimizer_bytes
  );
  const transient = payload.optimizer_transient_bytes;
  return [
    fromFigure('parameters', 'parameters', trans.__('Parameters'), payload.parameters_bytes),
    fromFigure('buffers', 'buffers', trans.__('Buffers'), payload.buffers_bytes),
    fromFigure('gradients', 'gradients', trans.__('Gradients'), payload.gradients_bytes),
    {
      ...optimizer,
      note:
        `${payload.settings.optimizer}` +
        (optimizer.note ? ` · ${optimizer.note}` : '') +
        (transient ? ` · ${trans.__('+%1 during step()', size(transient))}` : '')
    },
    {
      key: 'states',
      label: trans.__('Model states'),
      bytes:
        payload.parameters_bytes + payload.buffers_bytes + payload.gradients_bytes + payload.optimizer_bytes,
      atPeak: atPeak('states'),
      engine: payload.engine,
      note: trans.__('the four rows above; the bar shows what of them is alive at the peak'),
      subtotal: true
    },
    fromFigure('activations', 'activations', trans.__('Activations'), payload.activations_bytes),
    fromFigure('input', 'input', trans.__('Input batch'), payload.input_bytes, payload.settings.input),
    {
      key: 'autocast_cache',
      label: trans.__('Autocast cache'),
      bytes: payload.autocast_cache_bytes,
      atPeak: atPeak('autocast_cache'),
      engine: payload.engine,
      note: payload.settings.amp
        ? trans.__('low-precision weight copies (%1)', payload.settings.amp)
        : trans.__('AMP off')
    },
    {
      key: 'temporaries',
      label: trans.__('Temporaries'),
      bytes: payload.temporary_bytes,
      atPeak: atPeak('temporaries'),
      engine: payload.engine,
      note: trans.__('other live tensors at the peak (%1)', payload.peak_phase ?? trans.__('step'))
    },
    {
      key: 'workspace',
      label: trans.__('Workspace'),
      bytes: payload.workspace_bytes,
      atPeak: atPeak('workspace'),
      engine: workspaceEngine,
      note: trans.__('cuBLAS + cuDNN, inside reserved')
    },
    {
      key: 'context',
      label: trans.__('CUDA context'),
      bytes: payload.context_bytes,
      atPeak: atPeak('context'),
      engine: context?.engine ?? 'estimate',
      note: payload.device.context_basis || contextNote[payload.device.context_source]
    }
  ];
}

export function BreakdownTable(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element {
  const { payload, trans } = props;
  const rows = breakdownRows(payload, trans);
  // "At the peak": the stacked bar's figures, next to the step's sizes they are part of
  const atPeak = payload.breakdown_at_peak !== null;
  const totals: Array<[string, string, number | null, string]> = [
    [
      'peak_allocated',
      trans.__('Peak allocated'),
      payload.peak_allocated_bytes,
      trans.__('peak in %1, step 2', payload.peak_phase ?? trans.__('step'))
    ],
    [
      'peak_reserved',
      trans.__('Peak reserved'),
      payload.peak_reserved_bytes,
      trans.__('caching-allocator segments')
    ],
    [
      'peak',
      trans.__('Device footprint'),
      payload.peak_bytes,
      trans.__('peak reserved + a CUDA context not yet created')
    ]
  ];
  return (
    <table className="jp-GpuMem-richTable jp-GpuMem-breakdown">
      <caption>{trans.__('Memory of one training step (batch %1)', payload.settings.batch_size)}</caption>
      <thead>
        <tr>
          <th>{trans.__('Category')}</th>
          <th className="jp-GpuMem-num">{trans.__('Size')}</th>
          {atPeak && (
            <th
              className="jp-GpuMem-num"
              title={trans.__(
                'alive at the peak (%1): the figures of the bar above',
                payload.peak_phase ?? ''
              )}
            >
              {trans.__('At the peak')}
            </th>
          )}
          <th>{trans.__('Engine')}</th>
          <th>{trans.__('Note')}</th>
        </tr>
      </thead>
      <tbody>
        {rows.map(row => (
          <tr key={row.key} data-row={row.key} className={row.subtotal ? 'jp-GpuMem-subtotal' : undefined}>
            <td>{row.label}</td>
            <td className="jp-GpuMem-num">{size(row.bytes)}</td>
            {atPeak && (
              <td className="jp-GpuMem-num" data-column="at-peak">
                {size(row.atPeak)}
              </td>
            )}
            <td>
              <span className={`jp-GpuMem-engine jp-GpuMem-engine-${row.engine}`}>
                {engineLabel(row.engine, trans)}
              </span>
            </td>
            <td className="jp-GpuMem-richNote">{row.note}</td>
          </tr>
        ))}
      </tbody>
      <tfoot>
        {totals.map(([key, label, bytes, note]) => (
          <tr key={key} data-row={key}>
            <th scope="row">{label}</th>
            <td className="jp-GpuMem-num">{size(bytes)}</td>
            {atPeak && <td />}
            <td>
              <span className={`jp-GpuMem-engine jp-GpuMem-engine-${payload.engine}`}>
                {engineLabel(payload.engine, trans)}
              </span>
            </td>
            <td className="jp-GpuMem-richNote">{note}</td>
          </tr>
        ))}
      </tfoot>
    </table>
  );
}

/**
 * Where the per-rank figures come from: rank 0's step traced under the strategy's wrappers, or the formula (the
 * single-process states divided by the strategy's shares) the kernel falls back to. Nothing for outputs saved
 * before the kernel said.
 */
function DistributedEngine(props: { engine: IDistributed['engine']; trans: Trans }): JSX.Element | null {
  const { engine, trans } = props;
  if (engine === undefined) {
    return null;
  }
  const [label, title] =
    engine === 'traced'
      ? [trans.__('traced rank 0'), trans.__("rank 0's step traced under the strategy's wrappers")]
      : [
          trans.__('formula fallback'),
          trans.__("the single-process states divided by the strategy's shares (the rank was not traced)")
        ];
  return (
    <>
      {' '}
      <span
        className={`jp-GpuMem-engine jp-GpuMem-distributedEngine jp-GpuMem-engine-${engine === 'traced' ? 'traced' : 'estimate'}`}
        data-engine={engine}
        title={title}
      >
        {label}
      </span>
    </>
  );
}

export function DistributedTable(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element | null {
  const { trans } = props;
  const dist = props.payload.distributed;
  if (dist === null) {
    return null;
  }
  const rows: Array<[string, number, string]> = [
    [trans.__('Parameters'), dist.parameters_bytes, ''],
    [trans.__('Gradients'), dist.gradients_bytes, ''],
    [trans.__('Optimizer state'), dist.optimizer_bytes, ''],
    [trans.__('Extra'), dist.extra_bytes, dist.extra_note],
    [trans.__('Activations'), dist.activations_bytes, ''],
    [trans.__('Peak per rank'), dist.peak_bytes, dist.note]
  ];
  return (
    <table className="jp-GpuMem-richTable jp-GpuMem-distributed">
      <caption>
        {trans.__('Per rank (%1, world size %2)', dist.strategy, dist.world_size)}
        <DistributedEngine engine={dist.engine} trans={trans} />
      </caption>
      <tbody>
        {rows.map(([label, bytes, note]) => (
          <tr key={label}>
            <td>{label}</td>
            <td className="jp-GpuMem-num">{size(bytes)}</td>
            <td className="jp-GpuMem-richNote">{note}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
