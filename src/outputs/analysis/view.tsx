/**
 * The `%gpumem analyze` output (`application/vnd.gpumem.analysis.v1+json`): the memory of one training step by
 * category, a stacked bar against the device limit, predicted peak against batch size with the three picks,
 * recommendation cards, the error bound and notes, "Copy as YAML" and "Insert code" for gradient accumulation.
 *
 * The meaning of every figure follows gpumem_kernel/analysis/render.py (the text/plain and text/html fallbacks).
 */
import * as React from 'react';

import { Card, configYaml, type CopyText, CopyYamlButton, RichBadge, TextList } from '../kit';
import { analysisPickCaption, roundingText } from '../picks';
import type { CurrentStatus, FigureEngine, IAnalysisPayload, IFigure } from '../../wire/analysispayload';
import { byteAxis, Chart, type IChartMarker, type IChartSeries, type MarkerShape } from '../../ui/chart';
import { formatBytes, formatCount, formatSeconds, NOT_MEASURED } from '../../ui/format';
import type { Trans } from '../../ui/i18n';

/** Sizes in the analysis: binary units picked per value (KiB for the small models of tests and examples). */
export function size(bytes: number | null | undefined): string {
  return formatBytes(bytes, 'auto');
}

function figure(payload: IAnalysisPayload, name: string): IFigure | undefined {
  return payload.figures.find(f => f.name === name);
}

/** A figure engine in words. */
export function engineLabel(engine: FigureEngine | 'n/a', trans: Trans): string {
  switch (engine) {
    case 'read':
      return trans.__('read');
    case 'traced':
      return trans.__('traced');
    case 'measured':
      return trans.__('measured');
    case 'modelled':
      return trans.__('modelled');
    case 'estimate':
      return trans.__('estimate');
    case 'nvml':
      return trans.__('measured (NVML)');
    case 'source':
      return trans.__('PyTorch default');
    default:
      return NOT_MEASURED;
  }
}

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
      note: contextNote[payload.device.context_source]
    }
  ];
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

function StackedBar(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element {
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

/** Predicted peak at `batch`: from the curve (interpolated), else along the fit or the last segment. */
export function peakAt(payload: IAnalysisPayload, batch: number): number | null {
  const curve = [...payload.curve].sort((a, b) => a.batch_size - b.batch_size);
  if (curve.length === 0) {
    return payload.fit ? payload.fit.intercept_bytes + payload.fit.slope_bytes_per_sample * batch : null;
  }
  const exact = curve.find(p => p.batch_size === batch);
  if (exact) {
    return exact.peak_bytes;
  }
  for (let i = 1; i < curve.length; i++) {
    const [a, b] = [curve[i - 1], curve[i]];
    if (batch > a.batch_size && batch < b.batch_size) {
      return (
        a.peak_bytes +
        ((batch - a.batch_size) / (b.batch_size - a.batch_size)) * (b.peak_bytes - a.peak_bytes)
      );
    }
  }
  if (payload.fit && payload.fit.slope_bytes_per_sample > 0) {
    return payload.fit.intercept_bytes + payload.fit.slope_bytes_per_sample * batch;
  }
  if (curve.length >= 2) {
    const [a, b] =
      batch < curve[0].batch_size ? [curve[0], curve[1]] : [curve[curve.length - 2], curve[curve.length - 1]];
    const slope = (b.peak_bytes - a.peak_bytes) / (b.batch_size - a.batch_size);
    return Math.max(0, b.peak_bytes + slope * (batch - b.batch_size));
  }
  return curve[0].peak_bytes;
}

type PickName = 'maximum' | 'recommended' | 'safe' | 'current';

const PICK_SHAPES: Readonly<Record<PickName, MarkerShape>> = {
  maximum: 'diamond',
  recommended: 'circle',
  safe: 'square',
  current: 'cross'
};

function pickLabel(pick: PickName, trans: Trans): string {
  switch (pick) {
    case 'maximum':
      return trans.__('maximum');
    case 'recommended':
      return trans.__('recommended');
    case 'safe':
      return trans.__('safe');
    case 'current':
      return trans.__('current');
  }
}

/** The markers of the curve chart: the three picks (when there are) and the analysed batch. */
export function curveMarkers(payload: IAnalysisPayload, trans: Trans): IChartMarker[] {
  const recs = payload.recommendations;
  const largest = payload.curve.reduce((m, p) => Math.max(m, p.batch_size), 0);
  const picks: Array<[PickName, number | null]> = [
    ['safe', recs.safe],
    ['recommended', recs.recommended],
    ['maximum', recs.maximum],
    ['current', recs.current.batch_size]
  ];
  const markers: IChartMarker[] = [];
  for (const [name, batch] of picks) {
    if (batch === null || batch < 1) {
      continue;
    }
    const y = name === 'current' ? recs.current.peak_bytes : peakAt(payload, batch);
    const extrapolated = (name === 'maximum' && recs.extrapolated) || batch > largest;
    markers.push({
      id: name,
      kind: name,
      x: batch,
      y,
      axis: 'left',
      shape: PICK_SHAPES[name],
      className: `jp-GpuMem-pick-${name}`,
      short: name === 'current' ? '' : String(batch),
      // The picks are points of the predicted-peak curve: drawn on its line (the analysed batch keeps its own peak).
      series: name === 'current' ? undefined : 'peak',
      extrapolated,
      label:
        trans.__('%1: batch %2, predicted peak %3', pickLabel(name, trans), batch, size(y)) +
        (extrapolated ? ` (${trans.__('extrapolated')})` : '')
    });
  }
  return markers;
}

function CurveChart(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element | null {
  const { payload, trans } = props;
  const recs = payload.recommendations;
  const curve = [...payload.curve].sort((a, b) => a.batch_size - b.batch_size);
  if (curve.length === 0) {
    return null;
  }
  const markers = curveMarkers(payload, trans);
  const xs = [...curve.map(p => p.batch_size), ...markers.map(m => m.x)];
  const log = Math.max(...xs) / Math.min(...xs) >= 16;
  const largest = curve[curve.length - 1].batch_size;
  const peakPoints = curve.map(p => ({ x: p.batch_size, y: p.peak_bytes }));
  let dashedFrom: number | undefined;
  if (recs.maximum !== null && recs.maximum > largest) {
    const y = peakAt(payload, recs.maximum);
    if (y !== null) {
      peakPoints.push({ x: recs.maximum, y });
      dashedFrom = largest;
    }
  }
  const series: IChartSeries[] = [
    {
      id: 'peak',
      label: trans.__('predicted peak (%1)', payload.engine),
      colorClass: 'jp-GpuMem-chartColor-peak',
      axis: 'left',
      points: peakPoints,
      dashedFrom,
      linearBetweenPoints: true
    },
    {
      id: 'allocated',
      label: trans.__('peak allocated'),
      colorClass: 'jp-GpuMem-chartColor-allocated',
      axis: 'left',
      dashed: true,
      linearBetweenPoints: true,
      points: curve.map(p => ({ x: p.batch_size, y: p.peak_allocated_bytes }))
    }
  ];
  const limit = payload.device.limit_bytes;
  return (
    <Chart
      className="jp-GpuMem-analysisChart"
      caption={trans.__('Predicted peak against batch size')}
      ariaLabel={trans.__(
        'Predicted peak memory against batch size, with the device limit and the batch-size picks'
      )}
      x={{ label: trans.__('batch size'), format: v => formatCount(v), log }}
      left={byteAxis(trans.__('memory'))}
      series={series}
      rules={
        limit !== null
          ? [
              {
                id: 'limit',
                y: limit,
                axis: 'left',
                label: trans.__('device limit %1', size(limit)),
                className: 'jp-GpuMem-chartRule-limit'
              }
            ]
          : []
      }
      markers={markers}
      markerLegend={(['maximum', 'recommended', 'safe', 'current'] as PickName[])
        .filter(name => markers.some(m => m.kind === name))
        .map(name => ({
          shape: PICK_SHAPES[name],
          className: `jp-GpuMem-pick-${name}`,
          label: pickLabel(name, trans)
        }))}
    />
  );
}

function statusText(status: CurrentStatus, trans: Trans): string {
  switch (status) {
    case 'fits':
      return trans.__('fits');
    case 'tight':
      return trans.__('tight');
    case 'will-not-fit':
      return trans.__('will not fit');
    case 'unknown':
      return trans.__('unknown (no device limit)');
  }
}

/** The accumulation line, as the text report words it. */
export function accumulationText(payload: IAnalysisPayload, trans: Trans): string {
  const recs = payload.recommendations;
  const acc = recs.accumulation;
  const pick = recs.recommended;
  const target = acc.target_effective_batch;
  if (!pick || acc.recommended === null) {
    return trans.__('n/a (no recommendation)');
  }
  if (acc.explicit_target && pick >= target) {
    return trans.__('not needed: batch %1 reaches the target effective batch', target);
  }
  if (acc.recommended === 1) {
    return trans.__('not needed: %1 reaches the effective batch %2', pick, target);
  }
  // past the checks above the pick is below any explicit target: it is the micro-batch itself
  return trans.__(
    '%1 steps of %2 → effective batch %3 (target %4)',
    acc.recommended,
    pick,
    acc.recommended * pick,
    target
  );
}

function Cards(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element {
  const { payload, trans } = props;
  const recs = payload.recommendations;
  const limit = payload.device.limit_bytes;
  const current = recs.current;
  const value = (n: number | null): string => (n === null ? NOT_MEASURED : String(n));
  return (
    <div className="jp-GpuMem-cards">
      <Card
        kind="maximum"
        title={trans.__('Maximum')}
        value={value(recs.maximum)}
        detail={
          recs.maximum === null
            ? recs.note || trans.__('no device limit')
            : recs.maximum === 0
              ? recs.note || trans.__('even batch 1 does not fit')
              : trans.__('largest batch whose peak fits %1', size(limit))
        }
        extra={
          recs.extrapolated ? (
            <RichBadge kind="extrapolated">{trans.__('extrapolated')}</RichBadge>
          ) : undefined
        }
        className={recs.extrapolated ? 'jp-mod-extrapolated' : undefined}
      />
      <Card
        kind="recommended"
        title={trans.__('Recommended')}
        value={value(recs.recommended)}
        detail={pickDetail(trans.__('balanced'), analysisPickCaption(payload, 'recommended', trans))}
      />
      <Card
        kind="safe"
        title={trans.__('Safe')}
        value={value(recs.safe)}
        detail={pickDetail(trans.__('conservative'), analysisPickCaption(payload, 'safe', trans))}
      />
      <Card
        kind="current"
        title={trans.__('Current batch')}
        value={String(current.batch_size)}
        className={`jp-GpuMem-status-${current.status}`}
        detail={
          <>
            <span className={`jp-GpuMem-statusWord jp-GpuMem-status-${current.status}`}>
              {statusText(current.status, trans)}
            </span>
            {current.fraction_of_limit !== null &&
              ` · ${trans.__('%1% of the usable memory', (current.fraction_of_limit * 100).toFixed(1))}`}
          </>
        }
      />
      <Card
        kind="accumulation"
        title={trans.__('Gradient accumulation')}
        value={recs.accumulation.recommended === null ? NOT_MEASURED : `×${recs.accumulation.recommended}`}
        detail={accumulationText(payload, trans)}
      />
      <Card
        kind="lr"
        title={trans.__('Learning rate')}
        value={lrValue(payload)}
        detail={
          <>
            {recs.lr.linear !== null && recs.lr.linear !== 1 && (
              <span className="jp-GpuMem-lrRules">{trans.__('square-root / linear rule')} · </span>
            )}
            {recs.lr.hint}
          </>
        }
      />
    </div>
  );
}

/** "balanced · 50% of the maximum 507; aim 60%, rounded down to a power of two". */
function pickDetail(kind: string, caption: string | null): string {
  return caption === null ? kind : `${kind} · ${caption}`;
}

function lrValue(payload: IAnalysisPayload): string {
  const lr = payload.recommendations.lr;
  if (lr.linear === null || lr.sqrt === null) {
    return NOT_MEASURED;
  }
  if (lr.linear === 1) {
    return '×1';
  }
  return `×${lr.sqrt.toPrecision(3)} / ×${lr.linear.toPrecision(3)}`;
}

function BreakdownTable(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element {
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

function DistributedTable(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element | null {
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
      <caption>{trans.__('Per rank (%1, world size %2)', dist.strategy, dist.world_size)}</caption>
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

/**
 * The evaluation step (`--eval-batch N`), one line as the text report words it: "Evaluation at batch N: X
 * allocated, Y footprint; largest evaluation batch M", then the guides' rule of thumb. Null without one (and for
 * outputs saved before the kernel wrote it).
 */
export function evaluationText(payload: IAnalysisPayload, trans: Trans): [string, string] | null {
  const ev = payload.evaluation;
  if (!ev) {
    return null;
  }
  const largest = ev.max_batch === null ? trans.__('n/a (no device limit)') : String(ev.max_batch);
  return [
    trans.__(
      'Evaluation at batch %1: %2 allocated, %3 footprint; largest evaluation batch %4',
      ev.batch,
      size(ev.peak_allocated_bytes),
      size(ev.peak_bytes),
      largest
    ),
    trans.__(
      "the guides' rule of thumb: an evaluation batch at most 1.3 × the training batch (%1 for %2) unless measured",
      ev.rule_of_thumb_batch,
      ev.training_batch
    )
  ];
}

function EvaluationLine(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element | null {
  const text = evaluationText(props.payload, props.trans);
  const ev = props.payload.evaluation;
  if (text === null || !ev) {
    return null;
  }
  return (
    <p className="jp-GpuMem-evaluation" title={ev.note}>
      <span className="jp-GpuMem-richSectionTitle">{text[0]}</span>{' '}
      <span className="jp-GpuMem-richNote">({text[1]})</span>
    </p>
  );
}

function title(payload: IAnalysisPayload, trans: Trans): string {
  const device = payload.device;
  switch (device.source) {
    case 'nvml':
      return trans.__('Memory analysis · %1: %2', payload.settings.device ?? 'GPU 0', device.name ?? '?');
    case 'target':
    case 'memory':
      return trans.__('Memory analysis · planning for %1', device.name ?? '?');
    case 'none':
      return trans.__('Memory analysis · no GPU (pass --target or --memory for batch sizes)');
  }
}

/**
 * The payload's `accumulation_code`, written by the kernel: the gradient-accumulation loop at the recommended
 * pick, or null when none is needed (and for outputs saved before the kernel wrote it).
 */
export function accumulationCode(payload: IAnalysisPayload): string | null {
  const value = (payload as { accumulation_code?: unknown }).accumulation_code;
  return typeof value === 'string' ? value : null;
}

export interface IAnalysisViewProps {
  readonly payload: IAnalysisPayload;
  readonly trans: Trans;
  readonly copy: CopyText;
  /** Inserts a code cell below the output; null hides "Insert code". */
  readonly insertCell: ((code: string) => void) | null;
}

/** `<div class="jp-GpuMem-analysis">`. */
export function AnalysisView(props: IAnalysisViewProps): JSX.Element {
  const { payload, trans } = props;
  const settings = payload.settings;
  const yaml = configYaml(payload);
  const code = accumulationCode(payload);
  const insertCell = props.insertCell;
  const bound = payload.error_bound;
  const facts = [
    trans.__(
      '%1 parameters (%2 trainable)',
      formatCount(payload.model.parameter_count),
      formatCount(payload.model.trainable_parameter_count)
    ),
    trans.__('batch %1', settings.batch_size),
    settings.optimizer,
    settings.amp ? trans.__('AMP %1', settings.amp) : trans.__('AMP off'),
    trans.__('input %1', settings.input),
    trans.__(
      'largest layer %1 (%2)',
      payload.model.largest_layer.name,
      size(payload.model.largest_layer.bytes)
    )
  ];
  if (settings.grad_accum > 1) {
    facts.push(trans.__('accumulation %1', settings.grad_accum));
  }
  if (settings.checkpointing) {
    facts.push(trans.__('gradient checkpointing'));
  }
  facts.push(
    trans.__(
      'picks rounded: %1',
      roundingText(payload.recommendations.rounding, settings.round_source, trans)
    )
  );
  if (settings.world_size > 1) {
    facts.push(trans.__('%1 ranks (%2)', settings.world_size, settings.strategy ?? 'ddp'));
  }
  return (
    <div className="jp-GpuMem-analysis">
      <div className="jp-GpuMem-richHeader">
        <span className="jp-GpuMem-richTitle">{title(payload, trans)}</span>
        <RichBadge kind={payload.engine} title={trans.__('which engine produced the figures')}>
          {engineLabel(payload.engine, trans)}
        </RichBadge>
        <RichBadge kind="bound" title={bound.statement}>
          {trans.__('±%1%', Math.round(bound.relative * 100))}
        </RichBadge>
      </div>
      <div className="jp-GpuMem-richFacts">
        <span className="jp-GpuMem-modelName">{payload.model.name}</span>
        {facts.map((fact, i) => (
          <span key={i} className="jp-GpuMem-richFact">
            {fact}
          </span>
        ))}
        <span className="jp-GpuMem-richFact">{formatSeconds(payload.elapsed_seconds)}</span>
      </div>
      <Cards payload={payload} trans={trans} />
      <StackedBar payload={payload} trans={trans} />
      <CurveChart payload={payload} trans={trans} />
      <BreakdownTable payload={payload} trans={trans} />
      <DistributedTable payload={payload} trans={trans} />
      <EvaluationLine payload={payload} trans={trans} />
      <p className="jp-GpuMem-errorBound">
        <span className="jp-GpuMem-richSectionTitle">{trans.__('Error bound')}</span> {bound.statement}
      </p>
      {payload.recommendations.note && (
        <p className="jp-GpuMem-richNote jp-GpuMem-recommendationNote">{payload.recommendations.note}</p>
      )}
      <TextList className="jp-GpuMem-richNotes" title={trans.__('Notes')} items={payload.notes} />
      <div className="jp-GpuMem-richActions">
        <CopyYamlButton yaml={yaml} copy={props.copy} trans={trans} />
        {insertCell !== null && code !== null && (
          <button
            type="button"
            className="jp-GpuMem-insertCode jp-mod-styled"
            data-code={code}
            title={trans.__('Insert a cell with a gradient-accumulation loop at the recommended batch')}
            onClick={() => insertCell(code)}
          >
            {trans.__('Insert code')}
          </button>
        )}
      </div>
    </div>
  );
}
