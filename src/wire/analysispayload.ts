/**
 * The payloads of the kernel's analysis outputs, as TypeScript types with runtime guards:
 *
 * - `application/vnd.gpumem.analysis.v1+json` (`%gpumem analyze`, gpumem_kernel/wire/schemas/analysis.schema.json),
 * - `application/vnd.gpumem.autobatch.v1+json` (`%gpumem autobatch`, autobatch.schema.json),
 * - `application/vnd.gpumem.benchmark.v1+json` (`%gpumem benchmark`, benchmark.schema.json).
 *
 * Outputs are saved in notebooks and may have been written by another version of the kernel package, so a
 * renderer checks its payload before trusting it. Each guard returns `null` when the value fits, or one line
 * naming the first field that does not; src/__tests__/schemas.spec.ts checks that the guards and the JSON
 * Schemas agree. As everywhere in this extension, extra fields are accepted (additive changes).
 */
import {
  arrayOf,
  bool,
  bytes,
  type Check,
  count,
  describeValue,
  int,
  isRecord,
  nullable,
  num,
  numIn,
  object,
  oneOf,
  str
} from './validate';

export const ANALYSIS_MIME = 'application/vnd.gpumem.analysis.v1+json';
export const AUTOBATCH_MIME = 'application/vnd.gpumem.autobatch.v1+json';
export const BENCHMARK_MIME = 'application/vnd.gpumem.benchmark.v1+json';

// --- small checks not in validate.ts ---------------------------------------------------------------------

/** Exactly `value` (a JSON Schema `const`). */
function exactly(value: string | number | boolean): Check {
  return (actual, path) =>
    actual === value ? null : `${path}: expected ${JSON.stringify(value)}, got ${describeValue(actual)}`;
}

/** A whole number ≥ `min`. */
function intFrom(min: number): Check {
  return (value, path) =>
    typeof value === 'number' && Number.isInteger(value) && value >= min
      ? null
      : `${path}: expected an integer of at least ${min}, got ${describeValue(value)}`;
}

/** A finite number ≥ 0. */
const nonNegative: Check = (value, path) =>
  typeof value === 'number' && Number.isFinite(value) && value >= 0
    ? null
    : `${path}: expected a number of at least 0, got ${describeValue(value)}`;

/** A finite number in (0, 1] (a share of the device: memory targets). */
const share: Check = (value, path) =>
  typeof value === 'number' && Number.isFinite(value) && value > 0 && value <= 1
    ? null
    : `${path}: expected a number above 0 and at most 1, got ${describeValue(value)}`;

/** A finite number in [0, 1) (a margin). */
const margin: Check = (value, path) =>
  typeof value === 'number' && Number.isFinite(value) && value >= 0 && value < 1
    ? null
    : `${path}: expected a number from 0 up to (not including) 1, got ${describeValue(value)}`;

/** An object used as a map; with `keys`, every key must be one of them. */
function mapOf(check: Check, keys: ReadonlyArray<string> | null = null): Check {
  return (value, path) => {
    if (!isRecord(value)) {
      return `${path}: expected an object, got ${describeValue(value)}`;
    }
    for (const [key, item] of Object.entries(value)) {
      if (keys !== null && !keys.includes(key)) {
        return `${path}: unexpected key ${JSON.stringify(key)}`;
      }
      const problem = check(item, `${path}[${JSON.stringify(key)}]`);
      if (problem !== null) {
        return problem;
      }
    }
    return null;
  };
}

function problemOf(check: Check, value: unknown, root: string): string | null {
  return check(value, root);
}

// --- analysis ----------------------------------------------------------------------------------------------

export type AnalysisEngine = 'traced' | 'measured';
export type FigureEngine = 'read' | 'traced' | 'measured' | 'modelled' | 'estimate' | 'nvml' | 'source';
export type Phase = 'input' | 'forward' | 'backward' | 'optimizer' | 'zero_grad' | 'other';
export type Strategy = 'ddp' | 'fsdp' | 'zero1' | 'zero2' | 'zero3';
export type AmpMode = 'fp16' | 'bf16';
export type CurrentStatus = 'fits' | 'tight' | 'will-not-fit' | 'unknown';

const PHASES: ReadonlyArray<Phase> = ['input', 'forward', 'backward', 'optimizer', 'zero_grad', 'other'];
const STRATEGIES: ReadonlyArray<Strategy> = ['ddp', 'fsdp', 'zero1', 'zero2', 'zero3'];

export interface IAnalysisModel {
  readonly name: string;
  readonly parameter_count: number;
  readonly trainable_parameter_count: number;
  readonly parameters_by_dtype: Readonly<Record<string, number>>;
  readonly buffers_by_dtype: Readonly<Record<string, number>>;
  readonly largest_layer: { readonly name: string; readonly bytes: number };
}

export interface IAnalysisSettings {
  readonly batch_size: number;
  readonly input: string;
  readonly loss: string;
  readonly optimizer: string;
  readonly amp: AmpMode | null;
  readonly grad_accum: number;
  readonly checkpointing: boolean;
  readonly device: string | null;
  readonly target: string | null;
  readonly memory: string | null;
  readonly world_size: number;
  readonly strategy: Strategy | null;
  readonly multiple: number | null;
  readonly effective_batch: number;
}

export interface IFigure {
  readonly name: string;
  readonly bytes: number | null;
  readonly engine: FigureEngine;
  readonly note: string;
}

export interface IBreakdownAtPeak {
  readonly parameter: number;
  readonly buffer: number;
  readonly gradient: number;
  readonly optimizer_state: number;
  readonly input: number;
  readonly activation: number;
  readonly autocast_cache: number;
  readonly temporary: number;
}

export interface IAllocatorSummary {
  readonly segments: number;
  readonly small_segments: number;
  readonly large_segments: number;
  readonly fragmentation: number;
}

export interface IAnalysisDevice {
  readonly name: string | null;
  readonly source: 'nvml' | 'target' | 'memory' | 'none';
  readonly total_bytes: number | null;
  readonly free_bytes: number | null;
  readonly reclaimable_bytes: number;
  readonly reserve_bytes: number | null;
  readonly limit_bytes: number | null;
  readonly compute_capability: string | null;
  readonly bf16: boolean | null;
  readonly context_bytes: number;
  readonly context_source: 'estimate' | 'nvml' | 'in use' | 'none';
}

export interface ICurvePoint {
  readonly batch_size: number;
  readonly peak_bytes: number;
  readonly peak_allocated_bytes: number;
  readonly peak_reserved_bytes: number | null;
  readonly engine: AnalysisEngine;
}

export interface IFit {
  readonly intercept_bytes: number;
  readonly slope_bytes_per_sample: number;
  readonly max_relative_residual: number | null;
  readonly points: number;
}

export interface IRecommendations {
  readonly maximum: number | null;
  readonly recommended: number | null;
  readonly safe: number | null;
  readonly rounding: string;
  readonly extrapolated: boolean;
  readonly note: string;
  readonly current: {
    readonly batch_size: number;
    readonly peak_bytes: number;
    readonly status: CurrentStatus;
    readonly fraction_of_limit: number | null;
  };
  readonly accumulation: {
    readonly target_effective_batch: number;
    readonly explicit_target: boolean;
    readonly maximum: number | null;
    readonly recommended: number | null;
    readonly safe: number | null;
  };
  readonly lr: {
    readonly from_effective_batch: number;
    readonly to_effective_batch: number | null;
    readonly linear: number | null;
    readonly sqrt: number | null;
    readonly hint: string;
  };
}

export interface IDistributed {
  readonly world_size: number;
  readonly strategy: Strategy;
  readonly parameters_bytes: number;
  readonly gradients_bytes: number;
  readonly optimizer_bytes: number;
  readonly extra_bytes: number;
  readonly extra_note: string;
  readonly activations_bytes: number;
  readonly peak_bytes: number;
  readonly note: string;
}

export interface IErrorBound {
  readonly relative: number;
  readonly absolute_bytes: number;
  readonly statement: string;
}

/** `application/vnd.gpumem.analysis.v1+json`. */
export interface IAnalysisPayload {
  readonly version: 1;
  readonly engine: AnalysisEngine;
  readonly model: IAnalysisModel;
  readonly settings: IAnalysisSettings;
  readonly parameters_bytes: number;
  readonly buffers_bytes: number;
  readonly gradients_bytes: number;
  readonly optimizer_bytes: number;
  readonly optimizer_host_bytes: number;
  readonly optimizer_transient_bytes: number;
  readonly activations_bytes: number;
  readonly input_bytes: number;
  readonly autocast_cache_bytes: number;
  readonly temporary_bytes: number;
  readonly peak_live_bytes: number;
  readonly peak_allocated_bytes: number;
  readonly peak_reserved_bytes: number | null;
  readonly context_bytes: number;
  readonly workspace_bytes: number;
  readonly peak_bytes: number;
  readonly figures: ReadonlyArray<IFigure>;
  readonly breakdown_at_peak: IBreakdownAtPeak | null;
  readonly phase_peaks: Readonly<Partial<Record<Phase, number>>> | null;
  readonly peak_phase: Phase | null;
  readonly amp_saved_bytes: number | null;
  readonly allocator: IAllocatorSummary | null;
  readonly device: IAnalysisDevice;
  readonly curve: ReadonlyArray<ICurvePoint>;
  readonly fit: IFit | null;
  readonly recommendations: IRecommendations;
  readonly distributed: IDistributed | null;
  readonly error_bound: IErrorBound;
  readonly notes: ReadonlyArray<string>;
  readonly elapsed_seconds: number;
}

const analysisModel = object({
  name: str,
  parameter_count: count,
  trainable_parameter_count: count,
  parameters_by_dtype: mapOf(bytes),
  buffers_by_dtype: mapOf(bytes),
  largest_layer: object({ name: str, bytes })
});

const analysisSettings = object({
  batch_size: intFrom(1),
  input: str,
  loss: str,
  optimizer: str,
  amp: nullable(oneOf('fp16', 'bf16')),
  grad_accum: intFrom(1),
  checkpointing: bool,
  device: nullable(str),
  target: nullable(str),
  memory: nullable(str),
  world_size: intFrom(1),
  strategy: nullable(oneOf(...STRATEGIES)),
  multiple: nullable(intFrom(1)),
  effective_batch: intFrom(1)
});

const figure = object({
  name: str,
  bytes: nullable(bytes),
  engine: oneOf('read', 'traced', 'measured', 'modelled', 'estimate', 'nvml', 'source'),
  note: str
});

const breakdownAtPeak = object({
  parameter: bytes,
  buffer: bytes,
  gradient: bytes,
  optimizer_state: bytes,
  input: bytes,
  activation: bytes,
  autocast_cache: bytes,
  temporary: bytes
});

const allocatorSummary = object({
  segments: count,
  small_segments: count,
  large_segments: count,
  fragmentation: numIn(0, 1)
});

const analysisDevice = object({
  name: nullable(str),
  source: oneOf('nvml', 'target', 'memory', 'none'),
  total_bytes: nullable(bytes),
  free_bytes: nullable(bytes),
  reclaimable_bytes: bytes,
  reserve_bytes: nullable(bytes),
  limit_bytes: nullable(bytes),
  compute_capability: nullable(str),
  bf16: nullable(bool),
  context_bytes: bytes,
  context_source: oneOf('estimate', 'nvml', 'in use', 'none')
});

const curvePoint = object({
  batch_size: intFrom(1),
  peak_bytes: int,
  peak_allocated_bytes: int,
  peak_reserved_bytes: nullable(int),
  engine: oneOf('traced', 'measured')
});

const fit = object({
  intercept_bytes: num,
  slope_bytes_per_sample: num,
  max_relative_residual: nullable(num),
  points: count
});

const recommendations = object({
  maximum: nullable(count),
  recommended: nullable(count),
  safe: nullable(count),
  rounding: str,
  extrapolated: bool,
  note: str,
  current: object({
    batch_size: intFrom(1),
    peak_bytes: int,
    status: oneOf('fits', 'tight', 'will-not-fit', 'unknown'),
    fraction_of_limit: nullable(num)
  }),
  accumulation: object({
    target_effective_batch: intFrom(1),
    explicit_target: bool,
    maximum: nullable(count),
    recommended: nullable(count),
    safe: nullable(count)
  }),
  lr: object({
    from_effective_batch: intFrom(1),
    to_effective_batch: nullable(count),
    linear: nullable(num),
    sqrt: nullable(num),
    hint: str
  })
});

const distributed = object({
  world_size: intFrom(1),
  strategy: oneOf(...STRATEGIES),
  parameters_bytes: bytes,
  gradients_bytes: bytes,
  optimizer_bytes: bytes,
  extra_bytes: bytes,
  extra_note: str,
  activations_bytes: bytes,
  peak_bytes: int,
  note: str
});

const errorBound = object({ relative: nonNegative, absolute_bytes: bytes, statement: str });

const analysisPayload = object({
  version: exactly(1),
  engine: oneOf('traced', 'measured'),
  model: analysisModel,
  settings: analysisSettings,
  parameters_bytes: bytes,
  buffers_bytes: bytes,
  gradients_bytes: bytes,
  optimizer_bytes: bytes,
  optimizer_host_bytes: bytes,
  optimizer_transient_bytes: bytes,
  activations_bytes: bytes,
  input_bytes: bytes,
  autocast_cache_bytes: bytes,
  temporary_bytes: bytes,
  peak_live_bytes: bytes,
  peak_allocated_bytes: int,
  peak_reserved_bytes: nullable(int),
  context_bytes: bytes,
  workspace_bytes: bytes,
  peak_bytes: int,
  figures: arrayOf(figure),
  breakdown_at_peak: nullable(breakdownAtPeak),
  phase_peaks: nullable(mapOf(bytes, PHASES)),
  peak_phase: nullable(oneOf(...PHASES)),
  amp_saved_bytes: nullable(int),
  allocator: nullable(allocatorSummary),
  device: analysisDevice,
  curve: arrayOf(curvePoint),
  fit: nullable(fit),
  recommendations,
  distributed: nullable(distributed),
  error_bound: errorBound,
  notes: arrayOf(str),
  elapsed_seconds: nonNegative
});

/** Null when `value` is an analysis payload, else the first problem. */
export function analysisPayloadProblem(value: unknown): string | null {
  return problemOf(analysisPayload, value, 'analysis');
}

export function isAnalysisPayload(value: unknown): value is IAnalysisPayload {
  return analysisPayloadProblem(value) === null;
}

// --- autobatch ---------------------------------------------------------------------------------------------

export type TrialPhase =
  'start' | 'predicted' | 'grow' | 'shrink' | 'slope' | 'secant' | 'edge' | 'bisect' | 'scan';

export interface ITrial {
  readonly batch: number;
  readonly ok: boolean;
  readonly peak_bytes: number | null;
  readonly seconds: number;
  readonly reserved_bytes: number | null;
  readonly phase: TrialPhase;
  readonly error: string | null;
}

/** `application/vnd.gpumem.autobatch.v1+json`. */
export interface IAutobatchPayload {
  readonly version: 1;
  readonly maximum: number;
  readonly recommended: number;
  readonly margin: number;
  readonly rounding: string;
  readonly trials: ReadonlyArray<ITrial>;
  readonly n_trials: number;
  readonly seconds: number;
  readonly engine: 'cuda' | 'simulated';
  readonly device: string;
  readonly limit_bytes: number | null;
  readonly steps: number;
  readonly start_batch: number;
  readonly start_source: 'start_batch' | 'analysis' | 'default';
  readonly predicted: number | null;
  readonly model_name: string;
  readonly optimizer: string;
  readonly amp: AmpMode | null;
  readonly at_least: boolean;
  readonly interrupted: boolean;
  readonly notes: ReadonlyArray<string>;
}

const trial = object({
  batch: intFrom(1),
  ok: bool,
  peak_bytes: nullable(bytes),
  seconds: nonNegative,
  reserved_bytes: nullable(bytes),
  phase: oneOf('start', 'predicted', 'grow', 'shrink', 'slope', 'secant', 'edge', 'bisect', 'scan'),
  error: nullable(str)
});

const autobatchPayload = object({
  version: exactly(1),
  maximum: count,
  recommended: count,
  margin,
  rounding: str,
  trials: arrayOf(trial),
  n_trials: count,
  seconds: nonNegative,
  engine: oneOf('cuda', 'simulated'),
  device: str,
  limit_bytes: nullable(bytes),
  steps: intFrom(2),
  start_batch: intFrom(1),
  start_source: oneOf('start_batch', 'analysis', 'default'),
  predicted: nullable(count),
  model_name: str,
  optimizer: str,
  amp: nullable(oneOf('fp16', 'bf16')),
  at_least: bool,
  interrupted: bool,
  notes: arrayOf(str)
});

/** Null when `value` is an autobatch payload, else the first problem. */
export function autobatchPayloadProblem(value: unknown): string | null {
  return problemOf(autobatchPayload, value, 'autobatch');
}

export function isAutobatchPayload(value: unknown): value is IAutobatchPayload {
  return autobatchPayloadProblem(value) === null;
}

// --- benchmark ---------------------------------------------------------------------------------------------

export type RowStatus = 'ok' | 'oom' | 'swapping-suspected';
export type PickKind = 'highest_throughput' | 'best_efficiency' | 'recommended';

/** The three picks, in the order they are shown. */
export const PICK_KINDS: ReadonlyArray<PickKind> = ['highest_throughput', 'best_efficiency', 'recommended'];

export interface IBenchmarkRow {
  readonly batch_size: number;
  readonly num_workers: number;
  readonly amp: boolean;
  readonly pin_memory: boolean;
  readonly status: RowStatus;
  readonly io_ms: number | null;
  readonly h2d_ms: number | null;
  readonly forward_ms: number | null;
  readonly backward_ms: number | null;
  readonly optimizer_ms: number | null;
  readonly total_ms: number | null;
  readonly samples_per_s: number | null;
  readonly gpu_util: number | null;
  readonly peak_bytes: number | null;
  readonly peak_allocated_bytes: number | null;
  readonly peak_reserved_bytes: number | null;
  readonly device_used_bytes: number | null;
  /** samples/s per GiB of peak memory */
  readonly efficiency: number | null;
  readonly loader_restarts: number;
  readonly seconds: number;
  readonly error: string | null;
}

export interface IBenchmarkPick {
  readonly kind: PickKind;
  /** index into rows */
  readonly row: number;
  readonly batch_size: number;
  readonly num_workers: number;
  readonly amp: boolean;
  readonly pin_memory: boolean;
  readonly samples_per_s: number;
  readonly peak_bytes: number | null;
  readonly efficiency: number | null;
  readonly gpu_util: number | null;
  readonly note: string;
}

export interface IBenchmarkConfig {
  readonly batch_sizes: ReadonlyArray<number>;
  readonly num_workers_options: ReadonlyArray<number>;
  readonly steps_per_test: number;
  readonly warmup_steps: number;
  readonly test_mixed_precision: boolean;
  readonly test_pin_memory: boolean;
  readonly memory_target: number;
}

/** `application/vnd.gpumem.benchmark.v1+json`. */
export interface IBenchmarkPayload {
  readonly version: 1;
  readonly engine: 'cuda' | 'cpu' | 'simulated';
  readonly device: {
    readonly type: 'cuda' | 'cpu';
    readonly index: number | null;
    readonly name: string;
    readonly total_bytes: number | null;
  };
  readonly limit_bytes: number | null;
  readonly memory_target: number;
  readonly memory_source: string;
  readonly amp_dtype: 'float16' | 'bfloat16';
  readonly config: IBenchmarkConfig;
  readonly model: { readonly name: string; readonly parameter_count: number };
  readonly optimizer: string;
  readonly data: string;
  readonly rows: ReadonlyArray<IBenchmarkRow>;
  readonly picks: Readonly<Record<PickKind, IBenchmarkPick | null>>;
  readonly diagnostics: ReadonlyArray<string>;
  readonly notes: ReadonlyArray<string>;
  readonly interrupted: boolean;
  readonly seconds: number;
  readonly workers: { readonly leftover: ReadonlyArray<number>; readonly terminated: ReadonlyArray<number> };
}

const nullableNonNegative = nullable(nonNegative);

const benchmarkRow = object({
  batch_size: intFrom(1),
  num_workers: count,
  amp: bool,
  pin_memory: bool,
  status: oneOf('ok', 'oom', 'swapping-suspected'),
  io_ms: nullableNonNegative,
  h2d_ms: nullableNonNegative,
  forward_ms: nullableNonNegative,
  backward_ms: nullableNonNegative,
  optimizer_ms: nullableNonNegative,
  total_ms: nullableNonNegative,
  samples_per_s: nullableNonNegative,
  gpu_util: nullableNonNegative,
  peak_bytes: nullable(bytes),
  peak_allocated_bytes: nullable(bytes),
  peak_reserved_bytes: nullable(bytes),
  device_used_bytes: nullable(bytes),
  efficiency: nullableNonNegative,
  loader_restarts: count,
  seconds: nonNegative,
  error: nullable(str)
});

const benchmarkPick = object({
  kind: oneOf(...PICK_KINDS),
  row: count,
  batch_size: intFrom(1),
  num_workers: count,
  amp: bool,
  pin_memory: bool,
  samples_per_s: nonNegative,
  peak_bytes: nullable(bytes),
  efficiency: nullableNonNegative,
  gpu_util: nullableNonNegative,
  note: str
});

/** An array of at least one item. */
function nonEmpty(check: Check): Check {
  const items = arrayOf(check);
  return (value, path) =>
    items(value, path) ?? ((value as unknown[]).length > 0 ? null : `${path}: expected at least one item`);
}

const benchmarkPayload = object({
  version: exactly(1),
  engine: oneOf('cuda', 'cpu', 'simulated'),
  device: object({
    type: oneOf('cuda', 'cpu'),
    index: nullable(count),
    name: str,
    total_bytes: nullable(bytes)
  }),
  limit_bytes: nullable(bytes),
  memory_target: share,
  memory_source: str,
  amp_dtype: oneOf('float16', 'bfloat16'),
  config: object({
    batch_sizes: nonEmpty(intFrom(1)),
    num_workers_options: nonEmpty(count),
    steps_per_test: intFrom(1),
    warmup_steps: count,
    test_mixed_precision: bool,
    test_pin_memory: bool,
    memory_target: share
  }),
  model: object({ name: str, parameter_count: count }),
  optimizer: str,
  data: str,
  rows: arrayOf(benchmarkRow),
  picks: object({
    highest_throughput: nullable(benchmarkPick),
    best_efficiency: nullable(benchmarkPick),
    recommended: nullable(benchmarkPick)
  }),
  diagnostics: arrayOf(str),
  notes: arrayOf(str),
  interrupted: bool,
  seconds: nonNegative,
  workers: object({ leftover: arrayOf(int), terminated: arrayOf(int) })
});

/** Null when `value` is a benchmark payload, else the first problem. */
export function benchmarkPayloadProblem(value: unknown): string | null {
  return problemOf(benchmarkPayload, value, 'benchmark');
}

export function isBenchmarkPayload(value: unknown): value is IBenchmarkPayload {
  return benchmarkPayloadProblem(value) === null;
}
