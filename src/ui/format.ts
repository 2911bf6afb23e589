/**
 * Every number the extension shows goes through here: sizes, percentages, times, counts, durations, power
 * and energy.
 *
 * The kernel sends exact integer bytes; people compare GPU memory in GiB (what `torch.cuda` and most guides
 * print), in GB (what vendors print on the box) or in MiB (what `nvidia-smi` prints). The user picks one in
 * the settings for the panel and the status bar; 'auto' picks a binary unit per value (the outputs of the
 * `%gpumem` magics use it, as tests and examples run small models measured in KiB or MiB).
 */

/** Units offered in the settings. */
export type SizeUnit = 'GiB' | 'GB' | 'MiB' | 'auto';

/** All units, in the order the settings list them. */
export const SIZE_UNITS: ReadonlyArray<SizeUnit> = ['GiB', 'GB', 'MiB', 'auto'];

/** Shown where a value could not be measured (the wire format's null). */
export const NOT_MEASURED = 'n/a';

/** A unit with its size in bytes and the decimals it is usually shown with. */
export interface IScale {
  readonly symbol: string;
  readonly factor: number;
  readonly digits: number;
}

const KIB = 1024;
const MIB = 1024 ** 2;
const GIB = 1024 ** 3;
const TIB = 1024 ** 4;

const FIXED: Readonly<Record<Exclude<SizeUnit, 'auto'>, IScale>> = {
  GiB: { symbol: 'GiB', factor: GIB, digits: 2 },
  GB: { symbol: 'GB', factor: 1e9, digits: 2 },
  MiB: { symbol: 'MiB', factor: MIB, digits: 0 }
};

/**
 * How many decimals: a number, or 'short' for the compact spots (the status bar, device titles, chart axes):
 * at most one, so GiB and GB get one, MiB none, and 'auto' one below 100 of its unit and none above.
 */
export type Digits = number | 'short';

function decimals(scale: IScale, digits: Digits | undefined): number {
  if (scale.factor === 1) {
    return 0; // whole bytes
  }
  if (digits === undefined) {
    return scale.digits;
  }
  return digits === 'short' ? Math.min(scale.digits, 1) : digits;
}

/** True for one of the unit names the settings accept. */
export function isSizeUnit(value: unknown): value is SizeUnit {
  return typeof value === 'string' && (SIZE_UNITS as ReadonlyArray<string>).includes(value);
}

/**
 * The scale to show `bytes` in. For 'auto' this is the largest binary unit that keeps the number ≥ 1, with
 * about three significant digits.
 */
export function scaleFor(bytes: number, unit: SizeUnit = 'GiB'): IScale {
  if (unit !== 'auto') {
    return FIXED[unit];
  }
  const magnitude = Math.abs(bytes);
  let symbol: string;
  let factor: number;
  if (magnitude >= TIB) {
    [symbol, factor] = ['TiB', TIB];
  } else if (magnitude >= GIB) {
    [symbol, factor] = ['GiB', GIB];
  } else if (magnitude >= MIB) {
    [symbol, factor] = ['MiB', MIB];
  } else if (magnitude >= KIB) {
    [symbol, factor] = ['KiB', KIB];
  } else {
    return { symbol: 'B', factor: 1, digits: 0 };
  }
  const value = magnitude / factor;
  return { symbol, factor, digits: value < 10 ? 2 : value < 100 ? 1 : 0 };
}

/** The number part of a size in a given scale, e.g. "11.42". */
function formatInScale(bytes: number, scale: IScale, digits: Digits | undefined): string {
  return (bytes / scale.factor).toFixed(decimals(scale, digits));
}

function measured(bytes: number | null | undefined): bytes is number {
  return bytes !== null && bytes !== undefined && Number.isFinite(bytes);
}

/** The smaller units of each system, largest first, for values too small to read in the unit picked. */
const BINARY_STEPS: ReadonlyArray<IScale> = [
  { symbol: 'GiB', factor: GIB, digits: 2 },
  { symbol: 'MiB', factor: MIB, digits: 0 },
  { symbol: 'KiB', factor: KIB, digits: 0 },
  { symbol: 'B', factor: 1, digits: 0 }
];
const DECIMAL_STEPS: ReadonlyArray<IScale> = [
  { symbol: 'GB', factor: 1e9, digits: 2 },
  { symbol: 'MB', factor: 1e6, digits: 0 },
  { symbol: 'kB', factor: 1e3, digits: 0 },
  { symbol: 'B', factor: 1, digits: 0 }
];

/** How many significant digits a formatted number shows ("0.06" → 1, "61" → 2, "11.42" → 4). */
export function significantDigits(text: string): number {
  return text.replace(/[-.]/g, '').replace(/^0+/, '').length;
}

/**
 * The one rule for sizes too small for the unit the user picked: a value that would show fewer than two
 * significant digits there ("0.06 GiB", "0.0 GiB" in the short form, "5 MiB") is shown in the largest unit of
 * the same system (binary for GiB and MiB, decimal for GB) in which it is at least 1, with two or three
 * significant digits: "61 MiB", "512 MiB", "5.0 MiB", "60 MB". Zero stays in the unit picked ("0.00 GiB").
 */
function readable(bytes: number, scale: IScale, digits: Digits | undefined): string {
  const text = formatInScale(bytes, scale, digits);
  if (bytes === 0 || significantDigits(text) >= 2) {
    return `${text} ${scale.symbol}`;
  }
  const steps = scale.factor === 1e9 ? DECIMAL_STEPS : BINARY_STEPS;
  const magnitude = Math.abs(bytes);
  const step = steps.find(s => s.factor <= scale.factor && magnitude >= s.factor) ?? steps[steps.length - 1];
  const value = bytes / step.factor;
  const places = step.factor === 1 || Math.abs(value) >= 10 ? 0 : 1;
  return `${value.toFixed(places)} ${step.symbol}`;
}

/**
 * `formatBytes(12262485688)` → "11.42 GiB"; null or undefined (not measured) → "n/a". In a unit of the
 * settings, values too small to read there step down to a smaller unit (see `readable`: "61 MiB", not
 * "0.06 GiB").
 *
 * @param unit - a unit of the settings, or a scale shared by several values (the ticks of one axis, kept as
 *   given so that an axis reads in one unit).
 * @param digits - decimals; defaults to the unit's usual precision (2 for GiB/GB, 0 for MiB).
 */
export function formatBytes(
  bytes: number | null | undefined,
  unit: SizeUnit | IScale = 'GiB',
  digits?: Digits
): string {
  if (!measured(bytes)) {
    return NOT_MEASURED;
  }
  if (typeof unit !== 'string') {
    return `${formatInScale(bytes, unit, digits)} ${unit.symbol}`;
  }
  const scale = scaleFor(bytes, unit);
  return unit === 'auto'
    ? `${formatInScale(bytes, scale, digits)} ${scale.symbol}`
    : readable(bytes, scale, digits);
}

/**
 * "11.4 / 16.0 GiB": a part of a whole sharing one unit (the whole's, for 'auto'), as the status bar and
 * nvidia-smi show it.
 */
export function formatBytesPair(
  part: number | null | undefined,
  whole: number | null | undefined,
  unit: SizeUnit = 'GiB',
  digits?: Digits
): string {
  if (!measured(whole)) {
    return `${formatBytes(part, unit, digits)} / ${NOT_MEASURED}`;
  }
  const scale = scaleFor(whole, unit);
  const left = measured(part) ? formatInScale(part, scale, digits) : NOT_MEASURED;
  return `${left} / ${formatInScale(whole, scale, digits)} ${scale.symbol}`;
}

/** The share of `whole` in percent, or null when either side is unknown or whole is 0. */
export function percentOf(part: number | null | undefined, whole: number | null | undefined): number | null {
  if (part === null || part === undefined || whole === null || whole === undefined || whole <= 0) {
    return null;
  }
  return (100 * part) / whole;
}

/** "71.3%"; "n/a" when either side is unknown or whole is 0. */
export function formatPercent(
  part: number | null | undefined,
  whole: number | null | undefined,
  digits = 1
): string {
  const p = percentOf(part, whole);
  return p === null ? NOT_MEASURED : `${p.toFixed(digits)}%`;
}

/** A percentage the kernel measured (utilisation): "37%", or "n/a" for null. */
export function formatPercentValue(value: number | null | undefined): string {
  return value === null || value === undefined ? NOT_MEASURED : `${Math.round(value)}%`;
}

function pad2(n: number): string {
  return n < 10 ? `0${n}` : `${n}`;
}

/** Local time of day of an epoch time in seconds: "12:03:04". */
export function formatTimeOfDay(epochSeconds: number): string {
  const d = new Date(epochSeconds * 1000);
  return `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
}

/** A whole number with digit grouping ("34,666"). */
export function formatCount(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** Milliseconds with one decimal below 100 ("12.5", "250"), or "n/a". */
export function formatMs(ms: number | null): string {
  return ms === null ? NOT_MEASURED : ms >= 100 ? ms.toFixed(0) : ms.toFixed(1);
}

/** Seconds with one decimal below 100: "4.7 s", "250 s". */
export function formatSeconds(s: number): string {
  return s >= 100 ? `${s.toFixed(0)} s` : `${s.toFixed(1)} s`;
}

/** A short duration: "45 s", "3 min", "2 h". */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 90) {
    return `${s} s`;
  }
  if (s < 90 * 60) {
    return `${Math.round(s / 60)} min`;
  }
  return `${Math.round(s / 3600)} h`;
}

/** Power from NVML's milliwatts: "250 W" from 100 W, "8.5 W" below, "n/a" for null (the kernel's format_watts). */
export function formatWatts(milliwatts: number | null | undefined): string {
  if (milliwatts === null || milliwatts === undefined) {
    return NOT_MEASURED;
  }
  const watts = milliwatts / 1000;
  return watts >= 100 ? `${watts.toFixed(0)} W` : `${watts.toFixed(1)} W`;
}

/** Energy from joules in watt-hours: "1.25 kWh", "12.3 Wh", "2.50 Wh", "0.0139 Wh" (the kernel's format_watt_hours). */
export function formatWattHours(joules: number | null | undefined): string {
  if (joules === null || joules === undefined) {
    return NOT_MEASURED;
  }
  const wh = joules / 3600;
  if (wh >= 1000) {
    return `${(wh / 1000).toFixed(2)} kWh`;
  }
  if (wh >= 10) {
    return `${wh.toFixed(1)} Wh`;
  }
  return wh >= 1 ? `${wh.toFixed(2)} Wh` : `${wh.toFixed(4)} Wh`;
}

function threeFigures(x: number): string {
  return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
}

/** Energy in joules: "1.25 kJ", "250 J", "2.50 J", "12.5 mJ" (energy per sample; the kernel's format_joules). */
export function formatJoules(joules: number | null | undefined): string {
  if (joules === null || joules === undefined) {
    return NOT_MEASURED;
  }
  if (joules >= 1000) {
    return `${(joules / 1000).toFixed(2)} kJ`;
  }
  return joules >= 1 ? `${threeFigures(joules)} J` : `${threeFigures(joules * 1000)} mJ`;
}
