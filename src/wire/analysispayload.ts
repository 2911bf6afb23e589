/**
 * The payloads of the kernel's analysis outputs:
 *
 * - `application/vnd.gpumem.analysis.v1+json` (`%gpumem analyze`, gpumem_kernel/wire/schemas/analysis.schema.json),
 * - `application/vnd.gpumem.autobatch.v1+json` (`%gpumem autobatch`, autobatch.schema.json),
 * - `application/vnd.gpumem.benchmark.v1+json` (`%gpumem benchmark`, benchmark.schema.json),
 * - `application/vnd.gpumem.timeline.v1+json` (`%gpumem analyze … --timeline`, timeline.schema.json).
 *
 * Their types and checks are generated from those schemas (./generated/, `jlpm gen:wire`); this file exports
 * them under the names the rest of src/ uses. Outputs are saved in notebooks and may have been written by
 * another version of the kernel package, so a renderer checks its payload before trusting it: each
 * `…PayloadProblem` returns `null` when the value fits, or one line naming the first field that does not.
 * Fields a schema does not name are ignored (README.md beside the schemas, "Extra fields").
 */
import type {
  IAnalysisPayload,
  IAnalysisSettings,
  IAutobatchPayload,
  IBenchmarkPayload,
  IBenchmarkPick,
  IBenchmarkRow,
  IFigure,
  IRecommendations,
  ITimelinePayload,
  ITrial
} from './generated/types';
import * as checks from './generated/validators';

export type {
  IAllocatorSummary,
  IAnalysisDevice,
  IAnalysisLlm,
  IAnalysisLlmLogits,
  IAnalysisModel,
  IAnalysisPayload,
  IAnalysisSequenceSearch,
  IAnalysisSequenceSearchResults,
  IAnalysisSettings,
  IAutobatchPayload,
  IBenchmarkConfig,
  IBenchmarkPayload,
  IBenchmarkPick,
  IBenchmarkRow,
  IBreakdownAtPeak,
  ICurvePoint,
  IDistributed,
  IErrorBound,
  IFigure,
  IFit,
  IRecommendations,
  ITrial
} from './generated/types';

export const ANALYSIS_MIME = 'application/vnd.gpumem.analysis.v1+json';
export const AUTOBATCH_MIME = 'application/vnd.gpumem.autobatch.v1+json';
export const BENCHMARK_MIME = 'application/vnd.gpumem.benchmark.v1+json';

// --- analysis ----------------------------------------------------------------------------------------------

export type AnalysisEngine = IAnalysisPayload['engine'];
export type FigureEngine = IFigure['engine'];
export type Phase = NonNullable<IAnalysisPayload['peak_phase']>;
export type Strategy = NonNullable<IAnalysisSettings['strategy']>;
export type AmpMode = NonNullable<IAnalysisSettings['amp']>;
export type CurrentStatus = IRecommendations['current']['status'];

/** Null when `value` is an analysis payload, else the first problem. */
export function analysisPayloadProblem(value: unknown): string | null {
  return checks.analysisPayload(value, 'analysis');
}

export function isAnalysisPayload(value: unknown): value is IAnalysisPayload {
  return analysisPayloadProblem(value) === null;
}

// --- autobatch ---------------------------------------------------------------------------------------------

export type TrialPhase = ITrial['phase'];

/** Null when `value` is an autobatch payload, else the first problem. */
export function autobatchPayloadProblem(value: unknown): string | null {
  return checks.autobatchPayload(value, 'autobatch');
}

export function isAutobatchPayload(value: unknown): value is IAutobatchPayload {
  return autobatchPayloadProblem(value) === null;
}

// --- benchmark ---------------------------------------------------------------------------------------------

export type RowStatus = IBenchmarkRow['status'];
export type PickKind = IBenchmarkPick['kind'];

/** The benchmark guide's three picks, in the order they are shown. */
export const PICK_KINDS: ReadonlyArray<PickKind> = ['highest_throughput', 'best_efficiency', 'recommended'];

/** Every pick shown: the three, then the most energy-efficient (absent or null where energy was not measured). */
export const SHOWN_PICK_KINDS: ReadonlyArray<PickKind> = [...PICK_KINDS, 'most_energy_efficient'];

/** Null when `value` is a benchmark payload, else the first problem. */
export function benchmarkPayloadProblem(value: unknown): string | null {
  return checks.benchmarkPayload(value, 'benchmark');
}

export function isBenchmarkPayload(value: unknown): value is IBenchmarkPayload {
  return benchmarkPayloadProblem(value) === null;
}

// --- timeline ----------------------------------------------------------------------------------------------

export type {
  ITimelineBand,
  ITimelineByCategory,
  ITimelineCategory,
  ITimelineFailed,
  ITimelineFrame,
  ITimelineHolder,
  ITimelinePayload,
  ITimelineSeriesPoint,
  ITimelineSmallPoint,
  ITimelineStack
} from './generated/types';

/** `%gpumem analyze … --timeline` (predicted) and `%%gpumem --timeline` (recorded): timeline.schema.json. */
export const TIMELINE_MIME = 'application/vnd.gpumem.timeline.v1+json';

/** Null when `value` is a timeline payload, else the first problem. */
export function timelinePayloadProblem(value: unknown): string | null {
  return checks.timelinePayload(value, 'timeline');
}

export function isTimelinePayload(value: unknown): value is ITimelinePayload {
  return timelinePayloadProblem(value) === null;
}
