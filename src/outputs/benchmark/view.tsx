/**
 * The `%gpumem benchmark` output (`application/vnd.gpumem.benchmark.v1+json`): the summary table (one row per
 * batch size, workers, AMP and pin_memory, with the step's times per phase and, on a GPU, the energy per sample)
 * with its three picks and the most energy-efficient one highlighted,
 * throughput and peak memory against batch size (one line per workers / AMP / pin_memory combination), the
 * diagnostics in plain words, and "Copy as YAML" of the recommended configuration. The kernel may update the same output as rows finish: the view is a pure function of the
 * payload, so each update re-renders cleanly.
 */
import * as React from 'react';

import { batchSizeTicks, Card, configYaml, type CopyText, CopyYamlButton, RichBadge, TextList } from '../kit';
import {
  type IBenchmarkPayload,
  type IBenchmarkPick,
  type IBenchmarkRow,
  type PickKind,
  type RowStatus,
  SHOWN_PICK_KINDS
} from '../../wire/analysispayload';
import { Chart } from '../../ui/chart';
import { byteAxis } from '../../ui/chartscales';
import type { IChartMarker, IChartRule, IChartSeries, MarkerShape } from '../../ui/charttypes';
import {
  formatBytes,
  formatCount,
  formatJoules,
  formatMs,
  formatPercentValue,
  formatSeconds,
  formatWatts,
  NOT_MEASURED
} from '../../ui/format';
import type { Trans } from '../../ui/i18n';

const PICK_SHAPES: Readonly<Record<PickKind, MarkerShape>> = {
  highest_throughput: 'circle',
  best_efficiency: 'diamond',
  recommended: 'square',
  most_energy_efficient: 'diamond'
};

/** How many colours style/analysis.css defines for chart series. */
const COLORS = 6;

export function pickTitle(kind: PickKind, trans: Trans): string {
  switch (kind) {
    case 'highest_throughput':
      return trans.__('Highest throughput');
    case 'best_efficiency':
      return trans.__('Best efficiency');
    case 'recommended':
      return trans.__('Recommended');
    case 'most_energy_efficient':
      return trans.__('Most energy-efficient');
  }
}

/** Whether some row has energy per sample (a GPU run with NVML power; payloads from before lack it). */
function measuredEnergy(payload: IBenchmarkPayload): boolean {
  return payload.rows.some(r => r.energy_per_sample_j !== null && r.energy_per_sample_j !== undefined);
}

function statusText(status: RowStatus, trans: Trans): string {
  switch (status) {
    case 'ok':
      return trans.__('ok');
    case 'oom':
      return trans.__('OOM');
    case 'swapping-suspected':
      return trans.__('swapping suspected');
  }
}

function sameConfig(row: IBenchmarkRow, pick: IBenchmarkPick): boolean {
  return (
    row.batch_size === pick.batch_size &&
    row.num_workers === pick.num_workers &&
    row.amp === pick.amp &&
    row.pin_memory === pick.pin_memory
  );
}

/** The row index of each pick (its `row`, checked against the configuration; -1 when the row is not there). */
export function pickRows(payload: IBenchmarkPayload): Readonly<Record<PickKind, number>> {
  const out: Record<PickKind, number> = {
    highest_throughput: -1,
    best_efficiency: -1,
    recommended: -1,
    most_energy_efficient: -1
  };
  for (const kind of SHOWN_PICK_KINDS) {
    const pick = payload.picks[kind] ?? null;
    if (pick === null) {
      continue;
    }
    const row = payload.rows[pick.row];
    out[kind] =
      row !== undefined && sameConfig(row, pick)
        ? pick.row
        : payload.rows.findIndex(r => sameConfig(r, pick));
  }
  return out;
}

/** The workers / AMP / pin_memory combination of a row: the key of its chart line. */
function comboKey(row: { num_workers: number; amp: boolean; pin_memory: boolean }): string {
  return `w${row.num_workers}-${row.amp ? 'amp' : 'fp32'}-${row.pin_memory ? 'pin' : 'nopin'}`;
}

function comboLabel(row: { num_workers: number; amp: boolean; pin_memory: boolean }, trans: Trans): string {
  const parts = [
    trans._n('%1 worker', '%1 workers', row.num_workers, row.num_workers),
    row.amp ? trans.__('AMP') : trans.__('fp32')
  ];
  if (row.pin_memory) {
    parts.push(trans.__('pinned'));
  }
  return parts.join(' · ');
}

export interface IBenchmarkChartData {
  readonly series: IChartSeries[];
  readonly markers: IChartMarker[];
  readonly rules: IChartRule[];
}

/** Lines, markers and rules of the throughput-and-memory chart. */
export function benchmarkChartData(payload: IBenchmarkPayload, trans: Trans): IBenchmarkChartData {
  const combos: string[] = [];
  const byCombo = new Map<string, IBenchmarkRow[]>();
  for (const row of payload.rows) {
    const key = comboKey(row);
    if (!byCombo.has(key)) {
      combos.push(key);
      byCombo.set(key, []);
    }
    byCombo.get(key)?.push(row);
  }
  const series: IChartSeries[] = [];
  const markers: IChartMarker[] = [];
  combos.forEach((key, i) => {
    const rows = byCombo.get(key) ?? [];
    const colorClass = `jp-GpuMem-chartColor-${i % COLORS}`;
    const label = comboLabel(rows[0], trans);
    const measured = rows.filter(r => r.status !== 'oom');
    series.push({
      id: `${key}-throughput`,
      label: trans.__('%1: samples/s', label),
      colorClass,
      axis: 'left',
      points: measured
        .filter(r => r.samples_per_s !== null)
        .map(r => ({ x: r.batch_size, y: r.samples_per_s as number }))
    });
    series.push({
      id: `${key}-memory`,
      label: trans.__('%1: peak memory', label),
      colorClass,
      axis: 'right',
      dashed: true,
      points: measured
        .filter(r => r.peak_bytes !== null)
        .map(r => ({ x: r.batch_size, y: r.peak_bytes as number }))
    });
    for (const row of rows.filter(r => r.status === 'oom')) {
      markers.push({
        id: `oom-${key}-${row.batch_size}`,
        kind: 'oom',
        x: row.batch_size,
        y: null,
        axis: 'left',
        shape: 'cross',
        className: `jp-GpuMem-chartMarker-oom ${colorClass}`,
        label: trans.__('%1, batch %2: out of memory', label, row.batch_size)
      });
    }
  });
  const rowsOfPicks = pickRows(payload);
  for (const kind of SHOWN_PICK_KINDS) {
    const pick = payload.picks[kind] ?? null;
    if (pick === null || rowsOfPicks[kind] < 0) {
      continue;
    }
    markers.push({
      id: `pick-${kind}`,
      kind,
      x: pick.batch_size,
      y: pick.samples_per_s,
      axis: 'left',
      shape: PICK_SHAPES[kind],
      className: `jp-GpuMem-pick-${kind}`,
      // The pick the YAML copies is named on the plot, so that it reads as a point, not as part of a line.
      short: kind === 'recommended' ? trans.__('recommended') : undefined,
      label: trans.__(
        '%1: batch %2, %3, %4 samples/s',
        pickTitle(kind, trans),
        pick.batch_size,
        comboLabel(pick, trans),
        pick.samples_per_s.toFixed(1)
      )
    });
  }
  const rules: IChartRule[] = [];
  if (payload.limit_bytes !== null) {
    rules.push({
      id: 'limit',
      y: payload.limit_bytes,
      axis: 'right',
      label: trans.__('memory limit %1', formatBytes(payload.limit_bytes, 'auto')),
      className: 'jp-GpuMem-chartRule-limit'
    });
    rules.push({
      id: 'target',
      y: payload.limit_bytes * payload.memory_target,
      axis: 'right',
      label: trans.__('memory target %1%', Math.round(payload.memory_target * 100)),
      className: 'jp-GpuMem-chartRule-target'
    });
  }
  return { series, markers, rules };
}

/**
 * The memory axis' range, from 0: with a memory limit, 30% above it (or above the largest peak), so that the
 * limit line sits well below the top of the samples/s axis (8% above its largest value). Both axes share the
 * plot's height, so with the same headroom the pick of the highest throughput would lie on the limit line.
 */
export function memoryDomain(payload: IBenchmarkPayload): readonly [number, number] | undefined {
  if (payload.limit_bytes === null) {
    return undefined;
  }
  const peaks = payload.rows.map(r => r.peak_bytes ?? 0);
  return [0, Math.max(payload.limit_bytes, ...peaks) * 1.3];
}

function BenchmarkChart(props: { payload: IBenchmarkPayload; trans: Trans }): JSX.Element | null {
  const { payload, trans } = props;
  if (payload.rows.length === 0) {
    return null;
  }
  const { series, markers, rules } = benchmarkChartData(payload, trans);
  const xs = payload.rows.map(r => r.batch_size);
  const log = Math.max(...xs) / Math.min(...xs) >= 8;
  const recommended = payload.picks.recommended?.batch_size;
  return (
    <Chart
      className="jp-GpuMem-benchmarkChart"
      caption={trans.__('Throughput (solid) and peak memory (dashed) against batch size')}
      ariaLabel={trans.__(
        'Samples per second and peak memory against batch size, one line per workers and AMP combination'
      )}
      x={{
        label: trans.__('batch size'),
        format: v => formatCount(v),
        log,
        ticks: (lo, hi) => batchSizeTicks(lo, hi, log, recommended !== undefined ? [recommended] : [])
      }}
      left={{ label: trans.__('samples/s'), format: v => formatCount(v) }}
      right={{ ...byteAxis(trans.__('peak memory')), domain: memoryDomain(payload) }}
      series={series}
      markers={markers}
      rules={rules}
      markerLegend={[
        ...SHOWN_PICK_KINDS.filter(kind => markers.some(m => m.kind === kind)).map(kind => ({
          shape: PICK_SHAPES[kind],
          className: `jp-GpuMem-pick-${kind}`,
          label: pickTitle(kind, trans)
        })),
        ...(markers.some(m => m.kind === 'oom')
          ? [
              {
                shape: 'cross' as MarkerShape,
                className: 'jp-GpuMem-chartMarker-oom',
                label: trans.__('out of memory')
              }
            ]
          : [])
      ]}
    />
  );
}

function PickCards(props: { payload: IBenchmarkPayload; trans: Trans }): JSX.Element {
  const { payload, trans } = props;
  return (
    <div className="jp-GpuMem-cards">
      {SHOWN_PICK_KINDS.map(kind => {
        const pick = payload.picks[kind] ?? null;
        if (pick === null && kind === 'most_energy_efficient') {
          return null; // energy not measured: the notes say why
        }
        if (pick === null) {
          return (
            <Card
              key={kind}
              kind={kind}
              title={pickTitle(kind, trans)}
              value={NOT_MEASURED}
              detail={trans.__('no configuration ran within the limits')}
            />
          );
        }
        const facts = [
          comboLabel(pick, trans),
          trans.__('%1 samples/s', pick.samples_per_s.toFixed(1)),
          trans.__('peak %1', formatBytes(pick.peak_bytes, 'auto'))
        ];
        if (kind === 'best_efficiency' && pick.efficiency !== null) {
          facts.push(trans.__('%1 samples/s per GiB', pick.efficiency.toFixed(0)));
        }
        if (kind === 'most_energy_efficient') {
          facts.push(trans.__('%1 per sample', formatJoules(pick.energy_per_sample_j)));
        }
        if (pick.gpu_util !== null) {
          facts.push(trans.__('GPU %1', formatPercentValue(pick.gpu_util)));
        }
        return (
          <Card
            key={kind}
            kind={kind}
            className="jp-GpuMem-pickCard"
            title={pickTitle(kind, trans)}
            value={trans.__('batch %1', pick.batch_size)}
            detail={facts.join(' · ')}
            extra={pick.note ? <div className="jp-GpuMem-cardNote">{pick.note}</div> : undefined}
          />
        );
      })}
    </div>
  );
}

const PHASE_CELL = 'jp-GpuMem-num jp-GpuMem-phaseCell';

function cellClass(numeric: boolean, phase: boolean): string | undefined {
  return phase ? PHASE_CELL : numeric ? 'jp-GpuMem-num' : undefined;
}

/**
 * The step's phases in one line: the tooltip of "Step ms", what a narrow output shows of them; none for a row
 * that measured no step (out of memory).
 */
export function phasesTitle(row: IBenchmarkRow, trans: Trans): string | undefined {
  if (row.total_ms === null) {
    return undefined;
  }
  return trans.__(
    'I/O wait %1 · H2D %2 · forward %3 · backward %4 · optimizer %5 ms',
    formatMs(row.io_ms),
    formatMs(row.h2d_ms),
    formatMs(row.forward_ms),
    formatMs(row.backward_ms),
    formatMs(row.optimizer_ms)
  );
}

function SummaryTable(props: { payload: IBenchmarkPayload; trans: Trans }): JSX.Element {
  const { payload, trans } = props;
  const rowsOfPicks = pickRows(payload);
  const picksOf = (i: number): PickKind[] => SHOWN_PICK_KINDS.filter(kind => rowsOfPicks[kind] === i);
  const energy = measuredEnergy(payload);
  const yes = trans.__('yes');
  const no = trans.__('no');
  // [label, numeric, one of the step's phases]: the phases give way first where the output is narrow
  // (style/analysis.css); "Step ms" is their sum and its tooltip lists them.
  const head = [
    [trans.__('Batch'), true, false],
    [trans.__('Workers'), true, false],
    [trans.__('AMP'), false, false],
    [trans.__('Pin memory'), false, false],
    [trans.__('I/O wait ms'), true, true],
    [trans.__('H2D ms'), true, true],
    [trans.__('Forward ms'), true, true],
    [trans.__('Backward ms'), true, true],
    [trans.__('Optimizer ms'), true, true],
    [trans.__('Step ms'), true, false],
    [trans.__('Samples/s'), true, false],
    [trans.__('GPU util'), true, false],
    [trans.__('Peak memory'), true, false],
    ...(energy ? ([[trans.__('Energy/sample'), true, false]] as const) : []),
    [trans.__('Status'), false, false],
    [trans.__('Pick'), false, false]
  ] as const;
  return (
    <table className="jp-GpuMem-richTable jp-GpuMem-benchmarkTable">
      <caption>{trans.__('Summary (times per step, after warm-up)')}</caption>
      <thead>
        <tr>
          {head.map(([label, numeric, phase]) => (
            <th key={label} className={cellClass(numeric, phase)}>
              {label}
            </th>
          ))}
        </tr>
      </thead>
      <tbody>
        {payload.rows.map((row, i) => {
          const picks = picksOf(i);
          const className = [
            `jp-GpuMem-benchRow-${row.status}`,
            ...(picks.length > 0 ? ['jp-GpuMem-pickRow'] : []),
            ...picks.map(kind => `jp-GpuMem-pickRow-${kind}`)
          ].join(' ');
          return (
            <tr
              key={i}
              className={className}
              data-row={i}
              data-picks={picks.length > 0 ? picks.join(' ') : undefined}
            >
              <td className="jp-GpuMem-num">{row.batch_size}</td>
              <td className="jp-GpuMem-num">{row.num_workers}</td>
              <td>{row.amp ? yes : no}</td>
              <td>{row.pin_memory ? yes : no}</td>
              <td className={PHASE_CELL}>{formatMs(row.io_ms)}</td>
              <td className={PHASE_CELL}>{formatMs(row.h2d_ms)}</td>
              <td className={PHASE_CELL}>{formatMs(row.forward_ms)}</td>
              <td className={PHASE_CELL}>{formatMs(row.backward_ms)}</td>
              <td className={PHASE_CELL}>{formatMs(row.optimizer_ms)}</td>
              <td className="jp-GpuMem-num" title={phasesTitle(row, trans)}>
                {formatMs(row.total_ms)}
              </td>
              <td className="jp-GpuMem-num">
                {row.samples_per_s === null ? NOT_MEASURED : row.samples_per_s.toFixed(1)}
              </td>
              <td className="jp-GpuMem-num">{formatPercentValue(row.gpu_util)}</td>
              <td className="jp-GpuMem-num">{formatBytes(row.peak_bytes, 'auto')}</td>
              {energy && (
                <td
                  className="jp-GpuMem-num"
                  title={
                    row.mean_power_w !== null && row.mean_power_w !== undefined
                      ? trans.__('mean power %1', formatWatts(row.mean_power_w * 1000))
                      : undefined
                  }
                >
                  {formatJoules(row.energy_per_sample_j)}
                </td>
              )}
              <td title={row.error ?? undefined}>
                <span className={`jp-GpuMem-statusWord jp-GpuMem-bench-${row.status}`}>
                  {statusText(row.status, trans)}
                </span>
              </td>
              <td className="jp-GpuMem-pickCell">
                {picks.map(kind => (
                  <RichBadge key={kind} kind={`pick-${kind}`}>
                    {pickTitle(kind, trans)}
                  </RichBadge>
                ))}
              </td>
            </tr>
          );
        })}
        {payload.rows.length === 0 && (
          <tr>
            <td colSpan={head.length} className="jp-GpuMem-muted">
              {trans.__('No configuration has finished yet.')}
            </td>
          </tr>
        )}
      </tbody>
    </table>
  );
}

function engineBadge(payload: IBenchmarkPayload, trans: Trans): JSX.Element {
  switch (payload.engine) {
    case 'simulated':
      return (
        <RichBadge kind="simulated" title={payload.memory_source}>
          {trans.__('simulated')}
        </RichBadge>
      );
    case 'cpu':
      return <RichBadge kind="cpu">{trans.__('CPU')}</RichBadge>;
    case 'cuda':
      return <RichBadge kind="cuda">{trans.__('CUDA')}</RichBadge>;
  }
}

export interface IBenchmarkViewProps {
  readonly payload: IBenchmarkPayload;
  readonly trans: Trans;
  readonly copy: CopyText;
}

/** `<div class="jp-GpuMem-benchmark">`. */
export function BenchmarkView(props: IBenchmarkViewProps): JSX.Element {
  const { payload, trans } = props;
  const cfg = payload.config;
  const leftover = payload.workers.leftover;
  return (
    <div className="jp-GpuMem-benchmark">
      <div className="jp-GpuMem-richHeader">
        <span className="jp-GpuMem-richTitle">{trans.__('Benchmark · %1', payload.device.name)}</span>
        {engineBadge(payload, trans)}
        {payload.interrupted && (
          <RichBadge
            kind="interrupted"
            title={trans.__('stopped before the sweep finished: the table is partial')}
          >
            {trans.__('interrupted')}
          </RichBadge>
        )}
      </div>
      <div className="jp-GpuMem-richFacts">
        <span className="jp-GpuMem-modelName">{payload.model.name}</span>
        <span className="jp-GpuMem-richFact">
          {trans.__('%1 parameters', formatCount(payload.model.parameter_count))}
        </span>
        <span className="jp-GpuMem-richFact">{payload.optimizer}</span>
        <span className="jp-GpuMem-richFact">{payload.data}</span>
        <span className="jp-GpuMem-richFact">
          {trans.__('%1 steps per configuration after %2 warm-up', cfg.steps_per_test, cfg.warmup_steps)}
        </span>
        <span className="jp-GpuMem-richFact">{trans.__('AMP dtype %1', payload.amp_dtype)}</span>
        <span className="jp-GpuMem-richFact">{formatSeconds(payload.seconds)}</span>
      </div>
      <PickCards payload={payload} trans={trans} />
      <BenchmarkChart payload={payload} trans={trans} />
      <SummaryTable payload={payload} trans={trans} />
      <TextList
        className="jp-GpuMem-diagnostics"
        title={trans.__('Diagnostics')}
        items={payload.diagnostics}
      />
      {leftover.length > 0 && (
        <p className="jp-GpuMem-warning jp-GpuMem-leftoverWorkers">
          {trans.__('DataLoader worker processes still running: %1', leftover.join(', '))}
        </p>
      )}
      <TextList className="jp-GpuMem-richNotes" title={trans.__('Notes')} items={payload.notes} />
      <div className="jp-GpuMem-richActions">
        <CopyYamlButton
          yaml={configYaml(payload)}
          copy={props.copy}
          trans={trans}
          title={trans.__('Copy the recommended configuration (data.*, training.*)')}
        />
      </div>
    </div>
  );
}
