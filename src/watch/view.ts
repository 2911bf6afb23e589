/**
 * The output-area watch drawn with the DOM alone (no React, no JupyterLab): it runs in any front end with
 * Jupyter widgets. The words and numbers come from the panel's own pure modules (the bar's segments and their
 * names, the byte formats, the usage levels and their thresholds, the workers' line, the OOM checklist's and
 * the clear report's text), so the two say the same thing. Every kernel string is set as text, never as HTML.
 */
import { barTotal, deviceSegments, kernelTotal, segmentLabel, deviceKey } from '../channel/sample';
import { clearHeadline } from '../actions/clear/text';
import { diagnosisLines, familyLabel, splitSteps } from '../actions/oom/text';
import { deviceTitle } from '../panel/title';
import { workersText } from '../panel/workers';
import { DEFAULT_SETTINGS, usageLevel } from '../settings';
import {
  formatBytes,
  formatBytesPair,
  formatDuration,
  formatPercent,
  formatTimeOfDay,
  percentOf
} from '../ui/format';
import { untranslated as trans } from '../ui/i18n';
import type { IDevice, ISample } from '../wire/protocol';
import { CHART_SECONDS, type IPoint, type WatchState } from './state';

/** Steps of the OOM checklist shown in the watch; the whole checklist is the static output under the error. */
export const OOM_STEPS_SHOWN = 3;
const UNIT = DEFAULT_SETTINGS.units;
const SVG = 'http://www.w3.org/2000/svg';
const CHART_WIDTH = 240;
const CHART_HEIGHT = 40;
const MIN_CHART_SECONDS = 60;

/** What the view asks of the kernel (a custom message on the widget's comm). */
export type WatchRequest = 'history' | 'clear';

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** The share of the device in use, by every process, as the panel's warning level reads it. */
function devicePercent(device: IDevice): number | null {
  return percentOf(device.used ?? kernelTotal(device), device.total);
}

function bar(device: IDevice): HTMLElement {
  const segments = deviceSegments(device);
  const total = barTotal(device, segments);
  const node = element('div', 'jp-GpuMem-bar');
  node.setAttribute('role', 'img');
  node.setAttribute('aria-label', trans.__('GPU memory by holder'));
  for (const s of segments.filter(s => s.bytes > 0)) {
    const seg = element('div', `jp-GpuMem-seg jp-GpuMem-seg-${s.key}`);
    seg.style.width = `${total > 0 ? (100 * s.bytes) / total : 0}%`;
    seg.title = `${segmentLabel(s.key, trans)}: ${formatBytes(s.bytes, UNIT)} (${formatPercent(s.bytes, total)})`;
    node.appendChild(seg);
  }
  return node;
}

/** The chart's time span: what it has, from a minute (a new watch) up to CHART_SECONDS. */
export function chartSpan(points: ReadonlyArray<IPoint>, now: number): number {
  const oldest = points.length > 0 ? points[0].time : now;
  return Math.min(CHART_SECONDS, Math.max(MIN_CHART_SECONDS, now - oldest));
}

function polyline(
  points: ReadonlyArray<IPoint>,
  value: (p: IPoint) => number | null,
  total: number,
  now: number,
  span: number
): SVGPolylineElement {
  const line = document.createElementNS(SVG, 'polyline');
  const coords = points
    .filter(p => value(p) !== null)
    .map(p => {
      const x = CHART_WIDTH * (1 - (now - p.time) / span);
      const y = CHART_HEIGHT * (1 - Math.min(1, (value(p) as number) / total));
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    });
  line.setAttribute('points', coords.join(' '));
  return line;
}

/** The last minutes: the device's used memory and this kernel's, against the device's total. */
function chart(device: IDevice, points: ReadonlyArray<IPoint>, now: number): HTMLElement {
  const span = chartSpan(points, now);
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'jp-GpuMem-watchChart');
  svg.setAttribute('viewBox', `0 0 ${CHART_WIDTH} ${CHART_HEIGHT}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  const caption = trans.__(
    'last %1 · used by every process (grey), this kernel (blue)',
    formatDuration(span)
  );
  svg.setAttribute('aria-label', caption);
  const total = device.total ?? Math.max(1, ...points.map(p => Math.max(p.kernel, p.used ?? 0)));
  const used = polyline(points, p => p.used, total, now, span);
  used.setAttribute('class', 'jp-GpuMem-watchLine-used');
  const kernel = polyline(points, p => p.kernel, total, now, span);
  kernel.setAttribute('class', 'jp-GpuMem-watchLine-kernel');
  svg.append(used, kernel);
  const figure = element('div', 'jp-GpuMem-watchFigure');
  figure.append(svg, element('div', 'jp-GpuMem-watchNote', caption));
  return figure;
}

function numbers(device: IDevice, state: WatchState): string {
  const parts = [
    trans.__(
      '%1 used (%2)',
      formatBytesPair(device.used, device.total, UNIT),
      formatPercent(device.used, device.total)
    ),
    trans.__('this kernel %1', formatBytes(kernelTotal(device), UNIT))
  ];
  const peak = state.peak(deviceKey(device));
  if (peak !== null) {
    parts.push(trans.__('peak since watch %1', formatBytes(peak.kernel, UNIT)));
  }
  if (device.util_gpu !== null) {
    parts.push(trans.__('%1% busy', device.util_gpu));
  }
  return parts.join(' · ');
}

function deviceBlock(device: IDevice, state: WatchState, compact: boolean, now: number): HTMLElement {
  const level = usageLevel(devicePercent(device), DEFAULT_SETTINGS);
  const node = element('div', `jp-GpuMem-watchDevice jp-GpuMem-level-${level}`);
  node.dataset.level = level;
  node.appendChild(element('div', 'jp-GpuMem-watchTitle', deviceTitle(device, UNIT, trans)));
  node.appendChild(bar(device));
  node.appendChild(element('div', 'jp-GpuMem-watchNumbers', numbers(device, state)));
  if (!compact) {
    node.appendChild(chart(device, state.series(deviceKey(device)), now));
  }
  return node;
}

function host(sample: ISample): HTMLElement {
  const h = sample.host;
  const text = trans.__(
    'Host: kernel %1 · workers: %2 · %3 available',
    formatBytes(h.rss, UNIT),
    workersText(h.children, UNIT, trans),
    formatBytesPair(h.available, h.total, UNIT)
  );
  return element('div', 'jp-GpuMem-watchHost', text);
}

function oom(state: WatchState): HTMLElement | null {
  const payload = state.oom;
  if (payload === null) {
    return null;
  }
  const node = element('div', 'jp-GpuMem-watchOom');
  node.appendChild(element('div', 'jp-GpuMem-watchOomTitle', familyLabel(payload, trans)));
  const lines = element('ul', 'jp-GpuMem-watchOomLines');
  for (const line of [...payload.summary, ...diagnosisLines(payload, trans)]) {
    lines.appendChild(element('li', '', line));
  }
  node.appendChild(lines);
  const steps = element('ol', 'jp-GpuMem-watchOomSteps');
  for (const step of splitSteps(payload).apply.slice(0, OOM_STEPS_SHOWN)) {
    const item = element('li', 'jp-GpuMem-watchOomStep', step.title);
    item.dataset.stepId = step.id;
    steps.appendChild(item);
  }
  node.appendChild(steps);
  node.appendChild(
    element('div', 'jp-GpuMem-watchNote', trans.__('The whole checklist is under the error in its cell.'))
  );
  return node;
}

function header(state: WatchState): HTMLElement {
  const node = element('div', 'jp-GpuMem-watchHeader');
  node.appendChild(element('span', 'jp-GpuMem-watchName', trans.__('GPU memory')));
  const status =
    state.stopped ??
    (state.sample === null
      ? trans.__('waiting for the kernel…')
      : trans.__('live · %1', formatTimeOfDay(state.sample.time)));
  node.appendChild(element('span', 'jp-GpuMem-watchStatus', status));
  return node;
}

/** Draw `state` into `root` (replacing what was there): the whole watch, or one line a device (`compact`). */
export function renderWatch(
  root: HTMLElement,
  state: WatchState,
  compact: boolean,
  send: (request: WatchRequest) => void
): void {
  const sample = state.sample;
  root.className = `jp-GpuMem-watch${compact ? ' jp-GpuMem-watch-compact' : ''}`;
  root.dataset.state = state.stopped !== null ? 'stopped' : sample === null ? 'waiting' : 'live';
  root.dataset.seq = String(sample?.seq ?? 0);
  root.dataset.updates = String(state.updates);
  const parts: HTMLElement[] = [header(state)];
  if (sample !== null) {
    const now = sample.time;
    if (sample.gpu.devices.length === 0) {
      const reason = sample.gpu.reason ?? trans.__('NVML lists no device');
      parts.push(
        element('div', 'jp-GpuMem-nogpu', trans.__('No NVIDIA GPU visible to this kernel: %1', reason))
      );
    }
    parts.push(...sample.gpu.devices.map(d => deviceBlock(d, state, compact, now)));
    if (!compact) {
      parts.push(host(sample));
    }
  }
  if (!compact) {
    const actions = element('div', 'jp-GpuMem-watchActions');
    const clear = element('button', 'jp-GpuMem-watchClear', trans.__('Clear GPU memory'));
    clear.type = 'button';
    clear.title = trans.__(
      'Drop the last error’s traceback and cached outputs holding tensors, collect garbage and empty the CUDA cache (runs when the kernel is idle; no variable is deleted)'
    );
    clear.addEventListener('click', () => send('clear'));
    actions.appendChild(clear);
    if (state.clear !== null) {
      actions.appendChild(element('span', 'jp-GpuMem-watchCleared', clearHeadline(state.clear, UNIT, trans)));
    }
    parts.push(actions);
    const oomNode = oom(state);
    if (oomNode !== null) {
      parts.push(oomNode);
    }
  }
  if (state.problem !== null) {
    parts.push(element('div', 'jp-GpuMem-watchProblem', state.problem));
  }
  root.replaceChildren(...parts);
}
