/**
 * The curve chart of the analysis output: predicted peak against batch size, with the device limit and the
 * markers of the three picks and the analysed batch on the line.
 */
import * as React from 'react';

import { size } from './figures';
import { batchSizeTicks } from '../kit';
import type { IAnalysisPayload } from '../../wire/analysispayload';
import { Chart } from '../../ui/chart';
import { byteAxis } from '../../ui/chartscales';
import type { IChartMarker, IChartSeries, MarkerShape } from '../../ui/charttypes';
import { formatCount } from '../../ui/format';
import type { Trans } from '../../ui/i18n';

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

export function CurveChart(props: { payload: IAnalysisPayload; trans: Trans }): JSX.Element | null {
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
      x={{
        label: trans.__('batch size'),
        format: v => formatCount(v),
        log,
        ticks: (lo, hi) => batchSizeTicks(lo, hi, log, recs.maximum !== null ? [recs.maximum] : [])
      }}
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
