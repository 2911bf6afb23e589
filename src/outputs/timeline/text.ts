/**
 * The words of the memory timeline: category names, where an allocation came from ("In [3], line 5, in
 * forward" or "train.py:42, in step"), and the CSV of what the view shows (built in the browser when the kernel
 * no longer holds the full history).
 */
import type {
  ITimelineCategory,
  ITimelineFrame,
  ITimelinePayload,
  ITimelineStack
} from '../../wire/analysispayload';
import { CATEGORIES } from './geometry';
import type { Trans } from '../../ui/i18n';

export function categoryName(category: ITimelineCategory, trans: Trans): string {
  switch (category) {
    case 'parameter':
      return trans.__('parameters');
    case 'gradient':
      return trans.__('gradients');
    case 'optimizer_state':
      return trans.__('optimizer state');
    case 'activation':
      return trans.__('activations');
    case 'input':
      return trans.__('inputs');
    case 'other':
      return trans.__('other');
  }
}

/** "In [3], line 5" for a notebook cell, else "path/file.py:42" (no line: a place the kernel modelled). */
export function frameLocation(frame: ITimelineFrame, trans: Trans): string {
  if (frame.cell !== null) {
    return trans.__('In [%1], line %2', frame.cell, frame.line);
  }
  return frame.line > 0 ? `${frame.file}:${frame.line}` : frame.file;
}

/** "In [3], line 5, in forward". */
export function frameText(frame: ITimelineFrame, trans: Trans): string {
  return frame.name
    ? trans.__('%1, in %2', frameLocation(frame, trans), frame.name)
    : frameLocation(frame, trans);
}

/** The stack at `index`, or null (no index, or one the payload does not have). */
export function stackAt(payload: ITimelinePayload, index: number | null): ITimelineStack | null {
  return index === null ? null : (payload.stacks[index] ?? null);
}

/** The frame that allocated: the innermost user frame, else the innermost frame; null without frames. */
export function sourceFrame(stack: ITimelineStack | null): ITimelineFrame | null {
  if (stack === null || stack.frames.length === 0) {
    return null;
  }
  return (stack.source !== null ? stack.frames[stack.source] : undefined) ?? stack.frames[0];
}

/** Where an allocation came from, in one line. */
export function sourceText(payload: ITimelinePayload, index: number | null, trans: Trans): string {
  const stack = stackAt(payload, index);
  const frame = sourceFrame(stack);
  if (frame === null) {
    return trans.__('no frames recorded');
  }
  const text = frameText(frame, trans);
  return frame.user ? text : trans.__('%1 (no frame of your code)', text);
}

/** A CSV field: quoted when needed, and a leading = + - @ made inert for spreadsheets. */
export function csvField(value: string | number | null): string {
  if (value === null) {
    return '';
  }
  let text = String(value);
  if (typeof value === 'string' && /^[=+\-@\t\r]/.test(text)) {
    text = `'${text}`;
  }
  return /[",\n\r]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/**
 * The CSV of what the view shows: one row per band (each allocation drawn one by one), then one row per
 * step of the small allocations' series and category, then the peak.
 */
export function shownCsv(payload: ITimelinePayload): string {
  const rows: Array<Array<string | number | null>> = [
    ['kind', 'size_bytes', 'category', 'start_event', 'end_event', 'source', 'function', 'file', 'line']
  ];
  payload.bands.forEach(band => {
    const frame = sourceFrame(stackAt(payload, band.stack));
    rows.push([
      'band',
      band.size,
      band.category,
      band.start,
      band.end,
      frame === null ? null : frame.cell !== null ? `In [${frame.cell}]` : frame.file,
      frame?.name ?? null,
      frame?.file ?? null,
      frame?.line ?? null
    ]);
  });
  const small = [...payload.small].sort((a, b) => a.at - b.at);
  small.forEach((point, k) => {
    const next = k + 1 < small.length ? small[k + 1].at : payload.end;
    for (const category of CATEGORIES) {
      if (point.bytes[category] > 0) {
        rows.push(['small', point.bytes[category], category, point.at, next, null, null, null, null]);
      }
    }
  });
  if (payload.baseline > 0) {
    rows.push(['baseline', payload.baseline, null, 0, null, null, null, null, null]);
  }
  rows.push(['peak', payload.peak.bytes, null, payload.peak.at, null, null, null, null, null]);
  return rows.map(r => r.map(csvField).join(',')).join('\r\n') + '\r\n';
}
