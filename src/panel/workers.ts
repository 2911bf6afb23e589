/**
 * The DataLoader workers' line, as words: pure (no React), so the panel's host section and the output-area watch
 * (src/watch/) say it the same way.
 */
import { formatBytes, type SizeUnit } from '../ui/format';
import type { Trans } from '../ui/i18n';
import type { IHostMemory } from '../wire/protocol';

/** Growth below this (bytes per minute) is noise of the allocator, not copy-on-read: not shown. */
export const GROWTH_SHOWN_FROM = 1024 ** 2;

type Workers = IHostMemory['children'];

/** "4 processes, 1.20 GiB unique (RSS 5.10 GiB), +40 MiB/min"; "none" without workers. */
export function workersText(children: Workers, unit: SizeUnit, trans: Trans): string {
  const { count, rss, uss } = children;
  if (count === 0) {
    return trans.__('none');
  }
  if (uss === undefined) {
    return trans._n('%1 process, %2 RSS', '%1 processes, %2 RSS', count, formatBytes(rss, unit));
  }
  if (uss === null) {
    return trans._n(
      '%1 process, %2 RSS, unique memory not measurable',
      '%1 processes, %2 RSS, unique memory not measurable',
      count,
      formatBytes(rss, unit)
    );
  }
  const text = trans._n(
    '%1 process, %2 unique (RSS %3)',
    '%1 processes, %2 unique (RSS %3)',
    count,
    formatBytes(uss, unit),
    formatBytes(rss, unit)
  );
  const growth = children.uss_growth_per_min;
  if (growth === null || growth === undefined || Math.abs(growth) < GROWTH_SHOWN_FROM) {
    return text;
  }
  const signed = `${growth > 0 ? '+' : '\u2212'}${formatBytes(Math.abs(growth), unit)}`;
  return trans.__('%1, %2/min', text, signed);
}

/** The row's tooltip: what the numbers mean, with PSS when the kernel measured it. */
export function workersTitle(children: Workers, unit: SizeUnit, trans: Trans): string | undefined {
  if (children.count === 0 || children.uss === undefined) {
    return undefined;
  }
  const meaning = trans.__(
    'Unique memory (USS) is what ending the workers would free; RSS counts the pages they share with the kernel once per worker. A steady rise while iterating is copy-on-read of a Python-object dataset.'
  );
  if (children.pss === null || children.pss === undefined) {
    return meaning;
  }
  return trans.__(
    '%1 PSS (shared pages split between their users): %2.',
    meaning,
    formatBytes(children.pss, unit)
  );
}
