/**
 * The user settings of `jupyterlab-gpumem:plugin` (schema/plugin.json), read defensively.
 *
 * The settings registry validates against the schema, but a hand-edited or outdated settings file must not
 * break the panel: each value is clamped to its range and falls back to its default.
 */
import { isSizeUnit, type SizeUnit } from './ui/format';

export interface IGpuMemSettings {
  /** Seconds between samples (0.1–60). */
  readonly interval: number;
  /** Minutes of history kept for the timeline (1–60). */
  readonly historyMinutes: number;
  /** Percent of a device's memory in use from which the panel warns. */
  readonly warnThreshold: number;
  /** Percent of a device's memory in use from which the status bar turns red. */
  readonly criticalThreshold: number;
  readonly units: SizeUnit;
  /** Load the kernel shim silently when a Python kernel starts. */
  readonly autoLoad: boolean;
  readonly showStatusBar: boolean;
  /** Ask before "Restart and free" (JupyterLab's own restart dialog is not shown). */
  readonly confirmRestart: boolean;
  /** "Restart and free" also clears every output, like "Restart Kernel and Clear Outputs". */
  readonly clearOutputsOnRestart: boolean;
  /** How long "Restart and free" waits for NVML to drop the old kernel's PID (5–300 s). */
  readonly restartTimeoutSeconds: number;
  /** How the kernel's analyze/autobatch picks are rounded down without `--round` (sent with `configure`). */
  readonly batchRounding: BatchRounding;
  /** Minutes a kernel holding GPU memory may stay idle before the panel lists it as an idle GPU holder. */
  readonly idleMinutes: number;
  /**
   * Record a bounded CUDA allocator history while cells run, so the OOM checklist says what was alive (sent
   * with `configure` as `oom_timeline` to kernels whose hello lists "oom_timeline").
   */
  readonly oomTimeline: boolean;
  /** Tokens the kernel's sequence search steps in without `--seq-multiple` (sent with `configure`, 1–65536). */
  readonly seqMultiple: number;
}

/** The values of the "Batch-size rounding" setting, as `--round` takes them. */
export const BATCH_ROUNDINGS = ['pow2', '8', 'none'] as const;
export type BatchRounding = (typeof BATCH_ROUNDINGS)[number];

function isBatchRounding(value: unknown): value is BatchRounding {
  return (BATCH_ROUNDINGS as readonly unknown[]).includes(value);
}

export const DEFAULT_SETTINGS: IGpuMemSettings = {
  interval: 1,
  historyMinutes: 10,
  warnThreshold: 85,
  criticalThreshold: 95,
  units: 'GiB',
  autoLoad: true,
  showStatusBar: true,
  confirmRestart: true,
  clearOutputsOnRestart: false,
  restartTimeoutSeconds: 30,
  batchRounding: 'pow2',
  idleMinutes: 30,
  oomTimeline: false,
  seqMultiple: 64
};

function boolOr(value: unknown, fallback: boolean): boolean {
  return typeof value === 'boolean' ? value : fallback;
}

function numberIn(value: unknown, min: number, max: number, fallback: number): number {
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    return fallback;
  }
  return Math.min(max, Math.max(min, value));
}

/** Settings from the registry's composite object (unknown values → defaults, out of range → clamped). */
export function readSettings(composite: Readonly<Record<string, unknown>>): IGpuMemSettings {
  const warn = numberIn(composite.warnThreshold, 1, 100, DEFAULT_SETTINGS.warnThreshold);
  return {
    interval: numberIn(composite.interval, 0.1, 60, DEFAULT_SETTINGS.interval),
    historyMinutes: numberIn(composite.historyMinutes, 1, 60, DEFAULT_SETTINGS.historyMinutes),
    warnThreshold: warn,
    // A critical level below the warning level would never show the warning: keep them ordered.
    criticalThreshold: Math.max(
      warn,
      numberIn(composite.criticalThreshold, 1, 100, DEFAULT_SETTINGS.criticalThreshold)
    ),
    units: isSizeUnit(composite.units) ? composite.units : DEFAULT_SETTINGS.units,
    autoLoad: typeof composite.autoLoad === 'boolean' ? composite.autoLoad : DEFAULT_SETTINGS.autoLoad,
    showStatusBar:
      typeof composite.showStatusBar === 'boolean' ? composite.showStatusBar : DEFAULT_SETTINGS.showStatusBar,
    confirmRestart: boolOr(composite.confirmRestart, DEFAULT_SETTINGS.confirmRestart),
    clearOutputsOnRestart: boolOr(composite.clearOutputsOnRestart, DEFAULT_SETTINGS.clearOutputsOnRestart),
    restartTimeoutSeconds: numberIn(
      composite.restartTimeoutSeconds,
      5,
      300,
      DEFAULT_SETTINGS.restartTimeoutSeconds
    ),
    batchRounding: isBatchRounding(composite.batchRounding)
      ? composite.batchRounding
      : DEFAULT_SETTINGS.batchRounding,
    idleMinutes: numberIn(composite.idleMinutes, 1, 10080, DEFAULT_SETTINGS.idleMinutes),
    oomTimeline: boolOr(composite.oomTimeline, DEFAULT_SETTINGS.oomTimeline),
    // a whole number of tokens: the kernel refuses a fraction
    seqMultiple: Math.round(numberIn(composite.seqMultiple, 1, 65536, DEFAULT_SETTINGS.seqMultiple))
  };
}

/** The sampler's history window for these settings, in seconds (the protocol allows 10–3600). */
export function historySeconds(settings: IGpuMemSettings): number {
  return Math.min(3600, Math.max(10, Math.round(settings.historyMinutes * 60)));
}

/** Usage level of a device for the colours of the status item and the warning line. */
export type UsageLevel = 'ok' | 'warn' | 'critical';

/** The level of `percent` used under these settings. */
export function usageLevel(percent: number | null, settings: IGpuMemSettings): UsageLevel {
  if (percent === null) {
    return 'ok';
  }
  if (percent >= settings.criticalThreshold) {
    return 'critical';
  }
  return percent >= settings.warnThreshold ? 'warn' : 'ok';
}
