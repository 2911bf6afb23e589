/*
 * GENERATED FILE: do not edit. Made by scripts/gen_wire.mjs (`jlpm gen:wire`) from
 * gpumem_kernel/wire/schemas/*.schema.json, the one source of the wire format; change a schema, then run it.
 */

/**
 * The TypeScript types of every gpumem message and payload, one interface per object shape of the schemas.
 * src/wire/protocol.ts and src/wire/analysispayload.ts export them under the names the rest of src/ uses.
 */

export type ITimelineCategory =
  'parameter' | 'gradient' | 'optimizer_state' | 'activation' | 'input' | 'other';

/**
 * One training step's memory and the batch sizes that fit. Sizes are integer bytes.
 */
export interface IAnalysisPayload {
  version: 1;
  /**
   * traced: fake CPU tensors + caching-allocator model; measured: real steps on the GPU
   */
  engine: 'traced' | 'measured';
  model: IAnalysisModel;
  settings: IAnalysisSettings;
  /**
   * unique parameter storages (a tied weight counts once)
   */
  parameters_bytes: number;
  buffers_bytes: number;
  /**
   * gradients alive when optimizer.step() starts
   */
  gradients_bytes: number;
  /**
   * device-resident optimizer state (read from a stepped optimizer, else traced)
   */
  optimizer_bytes: number;
  /**
   * optimizer `step` scalars that stay on the host (non-fused optimizers)
   */
  optimizer_host_bytes: number;
  /**
   * extra bytes during step(): foreach temporaries
   */
  optimizer_transient_bytes: number;
  /**
   * forward outputs kept for backward, at the end of the forward pass
   */
  activations_bytes: number;
  input_bytes: number;
  /**
   * autocast's low-precision weight copies
   */
  autocast_cache_bytes: number;
  /**
   * other live bytes at the peak
   */
  temporary_bytes: number;
  /**
   * peak of live tensor bytes (unrounded)
   */
  peak_live_bytes: number;
  /**
   * peak allocated (caching-allocator blocks), per rank
   */
  peak_allocated_bytes: number;
  /**
   * peak reserved (segments), per rank
   */
  peak_reserved_bytes: number | null;
  /**
   * CUDA context: an estimate by GPU generation, or this kernel's measured one (NVML usage - torch reserved) when it exists
   */
  context_bytes: number;
  /**
   * cuBLAS workspaces + the largest cuDNN workspace (inside reserved)
   */
  workspace_bytes: number;
  /**
   * device footprint of a steady-state step: peak reserved + a CUDA context not yet created (estimate), per rank
   */
  peak_bytes: number;
  figures: IFigure[];
  breakdown_at_peak: null | IBreakdownAtPeak;
  phase_peaks: {
    [k: string]: number;
  } | null;
  peak_phase: null | 'input' | 'forward' | 'backward' | 'optimizer' | 'zero_grad' | 'other';
  /**
   * fp32 footprint minus AMP footprint at the current batch (negative: AMP costs memory)
   */
  amp_saved_bytes: number | null;
  allocator: null | IAllocatorSummary;
  device: IAnalysisDevice;
  curve: ICurvePoint[];
  fit: null | IFit;
  recommendations: IRecommendations;
  distributed: null | IDistributed;
  error_bound: IErrorBound;
  notes: string[];
  elapsed_seconds: number;
  /**
   * The analysed configuration in the training-config shape (data.batch_size, training.gradient_accumulation_steps, use_amp, amp_dtype, gradient_checkpointing), written by the kernel with PyYAML, comments first. The text output prints it; the browser's "Copy as YAML" copies it verbatim. Absent from outputs saved before it existed.
   */
  config_yaml?: string;
  /**
   * Python for a training loop with gradient accumulation at the recommended pick, keeping the analysed mixed precision (autocast, GradScaler for fp16); the browser's "Insert code" inserts it verbatim. null when the pick needs no accumulation. Absent from outputs saved before it existed.
   */
  accumulation_code?: string | null;
  evaluation?: null | IAnalysisEvaluation;
  llm?: null | IAnalysisLlm;
  sequence_search?: null | IAnalysisSequenceSearch;
  advice?: IAdvice;
}
export interface IAnalysisModel {
  name: string;
  parameter_count: number;
  trainable_parameter_count: number;
  parameters_by_dtype: {
    [k: string]: number;
  };
  buffers_by_dtype: {
    [k: string]: number;
  };
  largest_layer: IAnalysisModelLargestLayer;
}
export interface IAnalysisModelLargestLayer {
  name: string;
  bytes: number;
}
export interface IAnalysisSettings {
  batch_size: number;
  input: string;
  loss: string;
  optimizer: string;
  amp: null | 'fp16' | 'bf16';
  grad_accum: number;
  checkpointing: boolean;
  device: string | null;
  target: string | null;
  memory: string | null;
  world_size: number;
  strategy: null | 'ddp' | 'fsdp' | 'zero1' | 'zero2' | 'zero3';
  multiple: number | null;
  effective_batch: number;
  /**
   * how the picks were rounded down, as --round takes it: pow2 (a power of two), none (a whole batch) or N (a multiple of N); absent from outputs written before it existed
   */
  round?: string;
  /**
   * where the rounding came from: option (the command's --round or --multiple), setting (the JupyterLab setting "Batch-size rounding"), default (pow2)
   */
  round_source?: 'option' | 'setting' | 'default';
  step_autocast?: IAnalysisSettingsStepAutocast;
  pick_shares?: IAnalysisSettingsPickShares;
  /**
   * tokens per sample of a token input (--seq, or the input's own length); null when the input is not token ids or says no length. Absent from outputs saved before it existed.
   */
  seq?: number | null;
  /**
   * batch: the batch picks alone; seq: also the longest sequence at fixed batches (sequence_search). Absent from outputs saved before it existed.
   */
  search?: 'batch' | 'seq';
}
/**
 * the autocast a step of the user's own (step=) entered itself, as the step asked for it (device type, fp16 or bf16); amp is then that AMP when the request gave none. Absent when the step entered none, and from outputs written before it existed
 */
export interface IAnalysisSettingsStepAutocast {
  device_type: string;
  amp: 'fp16' | 'bf16';
}
/**
 * the shares of the maximum the recommended and safe picks aim at, before rounding
 */
export interface IAnalysisSettingsPickShares {
  recommended: number;
  safe: number;
}
export interface IFigure {
  name: string;
  bytes: number | null;
  engine: 'read' | 'traced' | 'measured' | 'modelled' | 'estimate' | 'nvml' | 'source';
  note: string;
}
export interface IBreakdownAtPeak {
  parameter: number;
  buffer: number;
  gradient: number;
  optimizer_state: number;
  input: number;
  activation: number;
  autocast_cache: number;
  temporary: number;
}
export interface IAllocatorSummary {
  segments: number;
  small_segments: number;
  large_segments: number;
  fragmentation: number;
}
export interface IAnalysisDevice {
  name: string | null;
  source: 'nvml' | 'target' | 'memory' | 'none';
  total_bytes: number | null;
  free_bytes: number | null;
  reclaimable_bytes: number;
  reserve_bytes: number | null;
  /**
   * what a step may use: free + reclaimable - reserve
   */
  limit_bytes: number | null;
  compute_capability: string | null;
  bf16: boolean | null;
  context_bytes: number;
  context_source: 'estimate' | 'nvml' | 'in use' | 'none';
  /**
   * what the context figure rests on: 'estimate: CUDA 12.4, lazy loading, sm_90, cuBLAS + cuBLASLt' or 'measured'
   */
  context_basis: string;
}
export interface ICurvePoint {
  batch_size: number;
  peak_bytes: number;
  peak_allocated_bytes: number;
  peak_reserved_bytes: number | null;
  engine: 'traced' | 'measured';
}
export interface IFit {
  intercept_bytes: number;
  slope_bytes_per_sample: number;
  max_relative_residual: number | null;
  points: number;
}
export interface IRecommendations {
  maximum: number | null;
  recommended: number | null;
  safe: number | null;
  /**
   * the rounding in words: "power of two", "multiple of N" or "none"
   */
  rounding: string;
  extrapolated: boolean;
  note: string;
  current: IAnalysisRecommendationsCurrent;
  accumulation: IAnalysisRecommendationsAccumulation;
  lr: IAnalysisRecommendationsLr;
}
export interface IAnalysisRecommendationsCurrent {
  batch_size: number;
  peak_bytes: number;
  status: 'fits' | 'tight' | 'will-not-fit' | 'unknown';
  fraction_of_limit: number | null;
}
export interface IAnalysisRecommendationsAccumulation {
  target_effective_batch: number;
  explicit_target: boolean;
  maximum: number | null;
  recommended: number | null;
  safe: number | null;
}
export interface IAnalysisRecommendationsLr {
  from_effective_batch: number;
  to_effective_batch: number | null;
  linear: number | null;
  sqrt: number | null;
  hint: string;
}
export interface IDistributed {
  world_size: number;
  strategy: 'ddp' | 'fsdp' | 'zero1' | 'zero2' | 'zero3';
  parameters_bytes: number;
  gradients_bytes: number;
  optimizer_bytes: number;
  extra_bytes: number;
  extra_note: string;
  activations_bytes: number;
  peak_bytes: number;
  note: string;
  /**
   * traced: rank 0's step traced under the strategy's wrappers, figures at its peak; formula: the single-process states divided by the strategy's shares
   */
  engine?: 'traced' | 'formula';
}
export interface IErrorBound {
  relative: number;
  absolute_bytes: number;
  statement: string;
}
/**
 * The evaluation step at --eval-batch N (model.eval() under torch.no_grad(): forward only, no gradients, no optimizer step), traced and replayed through the same allocator model as the training step, and the largest evaluation batch that fits (the same search). null without --eval-batch. Absent from outputs saved before it existed.
 */
export interface IAnalysisEvaluation {
  batch: number;
  training_batch: number;
  peak_live_bytes: number;
  peak_allocated_bytes: number;
  peak_reserved_bytes: number;
  peak_bytes: number;
  activations_bytes: number;
  input_bytes: number;
  /**
   * null without a device limit
   */
  max_batch: number | null;
  /**
   * The guides' rule of thumb: an evaluation batch of at most 1.3 x the training batch unless measured (rounded down).
   */
  rule_of_thumb_batch: number;
  engine: 'traced';
  note: string;
}
/**
 * What a language model's step spends on its logits and loss, its attention implementation and what gradient checkpointing wrapped; null for a model with none of these. Absent from outputs saved before it existed.
 */
export interface IAnalysisLlm {
  /**
   * config._attn_implementation: eager, sdpa, flash_attention_2, ...; null without a config
   */
  attention: string | null;
  /**
   * The attention path the trace took, one short phrase: 'SDPA, grouped-query, no mask', 'SDPA with a 4-D mask, K/V expanded', 'eager', ...; null when the trace saw no attention kernel. Absent from outputs saved before it existed.
   */
  attention_path?: string | null;
  checkpointing: null | IAnalysisLlmCheckpointing;
  logits: null | IAnalysisLlmLogits;
  notes: string[];
}
/**
 * The blocks gradient checkpointing wrapped (the repeated blocks of the model); null without checkpointing or when none were found.
 */
export interface IAnalysisLlmCheckpointing {
  blocks: number;
  /**
   * the blocks' class, e.g. LlamaDecoderLayer
   */
  kind: string;
  /**
   * their module names, runs joined: model.layers.0-15
   */
  names: string;
}
/**
 * The logits and loss of one micro-batch, measured from the trace: the lm_head's output, the float32 copy the loss makes of lower-precision logits, the cross-entropy's log-softmax, other vocabulary-wide forward copies, and their gradients in backward. null when the trace saw no lm_head output.
 */
export interface IAnalysisLlmLogits {
  vocab: number;
  /**
   * tokens per sample, from the lm_head output's size
   */
  seq: number;
  batch: number;
  /**
   * the logits' dtype, e.g. bfloat16
   */
  dtype: string;
  /**
   * the lm_head's output
   */
  logits_bytes: number;
  /**
   * the float32 copy the loss makes (logits.float()); 0 when the logits are float32 already
   */
  upcast_bytes: number;
  /**
   * the cross-entropy's log-softmax, kept for backward
   */
  log_softmax_bytes: number;
  /**
   * other vocabulary-wide forward copies (shifted logits, soft-capping)
   */
  other_bytes: number;
  /**
   * the vocabulary-wide gradients made in backward (transient)
   */
  backward_bytes: number;
  /**
   * the most of these alive at once during the step
   */
  held_bytes: number;
  /**
   * alive at the step's peak
   */
  at_peak_bytes: number;
  /**
   * vocab x seq x batch x bytes of the logits' dtype, beside the measured logits_bytes
   */
  formula_bytes: number;
}
/**
 * The longest sequence that fits at fixed batches (--search seq): the batch search run over the sequence length in multiples of `multiple` tokens, with the batch picks' recommended and safe shares. null without it. Absent from outputs saved before it existed.
 */
export interface IAnalysisSequenceSearch {
  multiple: number;
  /**
   * where the multiple came from: option (--seq-multiple), setting (the JupyterLab setting "Sequence-length multiple"), default (64)
   */
  multiple_source: 'option' | 'setting' | 'default';
  /**
   * the model's max_position_embeddings, when its config says
   */
  context: number | null;
  engine: 'traced';
  results: IAnalysisSequenceSearchResults[];
}
export interface IAnalysisSequenceSearchResults {
  batch: number;
  /**
   * the longest sequence that fits, a multiple of `multiple`; null without a device limit; 0: not even one multiple fits
   */
  maximum: number | null;
  recommended: number | null;
  safe: number | null;
  extrapolated: boolean;
  note: string;
  curve: IAnalysisSequenceSearchResultsCurve[];
  variable?: null | IAnalysisSequenceSearchResultsVariable;
}
export interface IAnalysisSequenceSearchResultsCurve {
  seq: number;
  peak_bytes: number;
}
/**
 * With variable lengths every length below the longest must fit too: the length up to which every multiple fits (the picks are taken below it), checked by tracing where the allocator's large segments change between traced lengths. null without a device limit or when no length fits. Absent from outputs saved before it existed.
 */
export interface IAnalysisSequenceSearchResultsVariable {
  /**
   * every multiple up to it fits; below `maximum` when a shorter length needs more
   */
  every_length: number;
  /**
   * the highest footprint (reserved + context) over the lengths up to every_length
   */
  peak_bytes: number;
  /**
   * the highest peak allocated over them
   */
  allocated_bytes: number;
  /**
   * the lengths traced for the check, ascending
   */
  checked: number[];
  /**
   * traces the check added to the search's
   */
  extra_traces: number;
  /**
   * false: the check's run budget ended first; every_length is the longest length verified
   */
  complete: boolean;
  dip: null | IAnalysisSequenceSearchResultsVariableDip;
}
/**
 * the shorter length with the highest footprint among those that need more than a longer one (the caching allocator's segments), and the longer length that needs least; null when the footprint never falls as the length grows
 */
export interface IAnalysisSequenceSearchResultsVariableDip {
  shorter: number;
  longer: number;
  shorter_bytes: number;
  longer_bytes: number;
}
/**
 * What makes it fit (%gpumem analyze --advise): the analysed step again with each lever, one row per lever or combination
 */
export interface IAdvice {
  /**
   * the analysed step's own peak footprint
   */
  peak_bytes: number;
  status: 'fits' | 'tight' | 'will-not-fit' | 'unknown';
  /**
   * the device the rows are judged against
   */
  target: string | null;
  /**
   * index into rows of the row to use; null when none fits
   */
  recommended: number | null;
  /**
   * one sentence: why that row
   */
  reason: string | null;
  rows: IAdviceRow[];
}
export interface IAdviceRow {
  /**
   * the lever, or levers joined with '+': amp-bf16, checkpointing, micro-batch, 8bit-optimizer, paged-optimizer, adafactor, lora, qlora, shorter-sequence, expandable-segments, fsdp-2/fsdp-4/fsdp-8, gpu
   */
  key: string;
  /**
   * the lever's label
   */
  lever: string;
  /**
   * the flags that set it, added to the analysed command
   */
  flags: string;
  /**
   * the whole %gpumem analyze line with those flags
   */
  command: string;
  /**
   * what the lever costs, one phrase
   */
  cost: string;
  cost_kind: 'none' | 'compute' | 'precision' | 'training' | 'gpus' | 'hardware';
  /**
   * the step's peak footprint with the lever; null when it could not be traced
   */
  peak_bytes: number | null;
  peak_allocated_bytes: number | null;
  /**
   * the largest batch (or sequence, by maximum_of) that fits with the lever
   */
  maximum: number | null;
  maximum_of: 'batch' | 'sequence';
  /**
   * the analysed (micro-)batch's status with the lever
   */
  status: 'fits' | 'tight' | 'will-not-fit' | 'unknown';
  fits: boolean;
  /**
   * the figures are one GPU's of several (a sharding lever)
   */
  per_rank: boolean;
  note: string | null;
}
/**
 * The largest batch that ran full training steps (forward, loss, backward, optimizer step) and a recommended batch below it. Sizes are integer bytes. engine 'simulated': a cap on tracked tensor bytes on the CPU, not a GPU.
 */
export interface IAutobatchPayload {
  version: 1;
  /**
   * 0: not even batch 1 fits
   */
  maximum: number;
  recommended: number;
  margin: number;
  /**
   * the rounding in words: "power of two", "multiple of N" or "none"
   */
  rounding: string;
  /**
   * how the picks were rounded down, as --round takes it: pow2 (a power of two), none (a whole batch) or N (a multiple of N); absent from outputs written before it existed
   */
  round?: string;
  /**
   * where the rounding came from: option (the command's --round or --multiple), setting (the JupyterLab setting "Batch-size rounding"), default (pow2)
   */
  round_source?: 'option' | 'setting' | 'default';
  trials: ITrial[];
  n_trials: number;
  seconds: number;
  engine: 'cuda' | 'simulated';
  device: string;
  limit_bytes: number | null;
  steps: number;
  start_batch: number;
  start_source: 'start_batch' | 'analysis' | 'default';
  predicted: number | null;
  model_name: string;
  optimizer: string;
  amp: 'fp16' | 'bf16' | null;
  at_least: boolean;
  interrupted: boolean;
  notes: string[];
  /**
   * The recommended batch in the training-config shape (data.batch_size, training.use_amp, amp_dtype), written by the kernel with PyYAML, comments first. The text output prints it; the browser's "Copy as YAML" copies it verbatim. Absent from outputs saved before it existed.
   */
  config_yaml?: string;
}
export interface ITrial {
  batch: number;
  ok: boolean;
  peak_bytes: number | null;
  seconds: number;
  reserved_bytes: number | null;
  phase: 'start' | 'predicted' | 'grow' | 'shrink' | 'slope' | 'secant' | 'edge' | 'bisect' | 'scan';
  error: string | null;
}
/**
 * The batch size x num_workers x AMP sweep: one row per configuration, three picks, diagnostics. Sizes are integer bytes, times milliseconds. engine 'simulated': CPU timings and a cap on tracked tensor bytes.
 */
export interface IBenchmarkPayload {
  version: 1;
  engine: 'cuda' | 'cpu' | 'simulated';
  device: IBenchmarkDevice;
  limit_bytes: number | null;
  memory_target: number;
  memory_source: string;
  amp_dtype: 'float16' | 'bfloat16';
  config: IBenchmarkConfig;
  model: IBenchmarkModel;
  optimizer: string;
  data: string;
  rows: IBenchmarkRow[];
  picks: IBenchmarkPicks;
  diagnostics: string[];
  notes: string[];
  interrupted: boolean;
  seconds: number;
  workers: IBenchmarkWorkers;
  /**
   * The recommended pick in the training-config shape (data.batch_size, num_workers, pin_memory; training.use_amp, amp_dtype), written by the kernel with PyYAML, comments first; null when no configuration qualified. The text output prints it; the browser's "Copy as YAML" copies it verbatim. Absent from outputs saved before it existed.
   */
  config_yaml?: string | null;
}
export interface IBenchmarkDevice {
  type: 'cuda' | 'cpu';
  index: number | null;
  name: string;
  total_bytes: number | null;
}
export interface IBenchmarkConfig {
  /**
   * @minItems 1
   */
  batch_sizes: number[];
  /**
   * @minItems 1
   */
  num_workers_options: number[];
  steps_per_test: number;
  warmup_steps: number;
  test_mixed_precision: boolean;
  test_pin_memory: boolean;
  memory_target: number;
}
export interface IBenchmarkModel {
  name: string;
  parameter_count: number;
}
export interface IBenchmarkRow {
  batch_size: number;
  num_workers: number;
  amp: boolean;
  pin_memory: boolean;
  status: 'ok' | 'oom' | 'swapping-suspected';
  io_ms: number | null;
  h2d_ms: number | null;
  forward_ms: number | null;
  backward_ms: number | null;
  optimizer_ms: number | null;
  total_ms: number | null;
  samples_per_s: number | null;
  gpu_util: number | null;
  peak_bytes: number | null;
  peak_allocated_bytes: number | null;
  peak_reserved_bytes: number | null;
  device_used_bytes: number | null;
  efficiency: number | null;
  /**
   * joules per sample: NVML, the whole GPU over the measured steps (the energy counter, or power × time where the GPU has none); null on the CPU or without power readings
   */
  energy_per_sample_j?: number | null;
  /**
   * mean power of the whole GPU over the measured steps, watts; null when not measured
   */
  mean_power_w?: number | null;
  loader_restarts: number;
  seconds: number;
  error: string | null;
}
export interface IBenchmarkPicks {
  highest_throughput: null | IBenchmarkPick;
  best_efficiency: null | IBenchmarkPick;
  recommended: null | IBenchmarkPick;
  /**
   * lowest energy per sample among the rows that ran; null where energy was not measured (added later: older payloads lack it)
   */
  most_energy_efficient?: null | IBenchmarkPick;
}
export interface IBenchmarkPick {
  kind: 'highest_throughput' | 'best_efficiency' | 'recommended' | 'most_energy_efficient';
  /**
   * index into rows
   */
  row: number;
  batch_size: number;
  num_workers: number;
  amp: boolean;
  pin_memory: boolean;
  samples_per_s: number;
  peak_bytes: number | null;
  efficiency: number | null;
  gpu_util: number | null;
  note: string;
  energy_per_sample_j?: number | null;
}
export interface IBenchmarkWorkers {
  leftover: number[];
  terminated: number[];
}
/**
 * Written by gpumem_kernel/clear/reclaim.py:ClearReport.to_payload. Sizes are integer bytes; null: not measurable.
 */
export interface IClearPayload {
  version: 1;
  dry_run: boolean;
  torch_imported: boolean;
  cuda_initialized: boolean;
  traceback_sources: string[];
  traceback_frames: number;
  traceback_freed: null | IClearHolder;
  output_cache: IClearHolder[];
  output_cache_entries: number;
  deleted: IClearHolder[];
  gc_collected: number | null;
  emptied_cache: boolean;
  devices: IClearDevice[];
  host_rss_before: number | null;
  host_rss_after: number | null;
  holders: IClearHolder[];
  holders_more: number;
  notes: string[];
  reclaimed: {
    [k: string]: number | null;
  };
}
/**
 * A name that keeps tensors alive and the bytes only it keeps alive, per device (cuda:N, cpu, mps); graph_by_device (absent from older kernels): what it keeps alive only through autograd graphs (tensors saved for backward), not in `bytes`.
 */
export interface IClearHolder {
  name: string;
  kind: 'tensor' | 'module' | 'optimizer' | 'list' | 'tuple' | 'dict' | 'set' | 'traceback' | 'other';
  type_name: string;
  bytes: number;
  by_device: IClearByDevice;
  tensors: number;
  shape: number[] | null;
  dtype: string | null;
  graph_by_device?: IClearByDevice;
}
export interface IClearByDevice {
  [k: string]: number;
}
/**
 * One CUDA device: torch allocator figures (when CUDA is initialised) and NVML's figure for this process.
 */
export interface IClearDevice {
  device: string;
  name: string | null;
  allocated_before: number | null;
  allocated_after: number | null;
  reserved_before: number | null;
  reserved_after: number | null;
  this_kernel_before: number | null;
  this_kernel_after: number | null;
}
export interface IErrorMessage {
  type: 'error';
  id: string | null;
  code: 'bad-request' | 'unknown-action' | 'internal';
  message: string;
}
/**
 * Memory that keeps growing (gpumem_kernel/growth): the running cell's trend, sent with every sample while one is claimed and once with null when the claim or the cell ends; and, after a cell's run, its re-run notice.
 */
export interface IGrowth {
  type: 'growth';
  /**
   * seconds since the epoch
   */
  time: number;
  /**
   * Allocated grows steadily inside the cell running now; null: no trend claimed, or no cell running.
   */
  running: IRunningGrowth | null;
  /**
   * Re-running the cell that just ended leaves allocated higher by a consistent step; null: none.
   */
  rerun: IRerunGrowth | null;
}
export interface IRunningGrowth {
  /**
   * "cuda:0"
   */
  device: string;
  /**
   * the running cell's execution count
   */
  cell: number | null;
  /**
   * bytes per minute
   */
  rate: number;
  /**
   * at the newest sample
   */
  allocated: number;
  /**
   * when the cell started, seconds since the epoch
   */
  since: number;
  /**
   * the span the trend was fitted over
   */
  seconds: number;
  samples: number;
  /**
   * seconds until the device is full at this rate; null: not known
   */
  full_in: number | null;
}
export interface IRerunGrowth {
  /**
   * this run's execution count: Cell [12]
   */
  cell: number | null;
  /**
   * the notebook's cell id, when the front end sent it
   */
  cell_id: string | null;
  /**
   * "cuda:0", or "host": the kernel's resident memory (RSS), whose steps are RSS bytes
   */
  device: string;
  /**
   * bytes allocated each run leaves (median)
   */
  step: number;
  /**
   * the same runs' median change of reserved bytes
   */
  reserved_step: number;
  /**
   * consecutive runs with that step
   */
  runs: number;
  /**
   * runs until the device is full at this rate; null: not known
   */
  runs_left: number | null;
  /**
   * the holders that grew since the cell's previous run, largest growth first
   *
   * @maxItems 5
   */
  holders: IGrowingHolder[];
  /**
   * the leak pattern found (gpumem_kernel/growth/rules.py); null: none
   */
  pattern:
    'loss_with_graph' | 'eval_with_graph' | 'outputs_with_graph' | 'output_cache' | 'kept_old_object' | null;
  /**
   * what to change, for that pattern
   */
  fix: string | null;
}
export interface IGrowingHolder {
  name: string;
  /**
   * how much more it reaches than after the previous run
   */
  bytes: number;
  /**
   * how many more tensors it reaches
   */
  tensors: number;
  /**
   * what it is now: list of 4 tensors with grad history
   */
  description: string;
}
export interface IHello {
  type: 'hello';
  protocol: number;
  version: string;
  pid: number;
  capabilities: string[];
  interval: number;
  history_seconds: number;
  python: string;
  ipykernel: string | null;
  torch: string | null;
  /**
   * start time of the kernel process (psutil create_time, seconds since the epoch); with pid, identifies it for the processes/terminate actions. Optional: older kernels omit it.
   */
  create_time?: number | null;
}
export interface IHistory {
  type: 'history';
  samples: ISample[];
}
export interface ISample {
  type: 'sample';
  /**
   * position in the sampler's stream, from 1; 0 for a sample taken on request
   */
  seq: number;
  /**
   * seconds since the epoch
   */
  time: number;
  gpu: IGpuInfo;
  kernel: IKernelUsage;
  host: IHostMemory;
  /**
   * new problems since the last sample (each reported once)
   */
  errors: string[];
}
export interface IGpuInfo {
  available: boolean;
  reason: string | null;
  driver_version: string | null;
  cuda_driver_version: string | null;
  /**
   * CUDA_VISIBLE_DEVICES as the kernel sees it; null when unset
   */
  visible_devices: string | null;
  device_order: 'FASTEST_FIRST' | 'PCI_BUS_ID';
  devices: IDevice[];
}
export interface IDevice {
  nvml_index: number;
  /**
   * torch's cuda:N for this kernel; null when CUDA_VISIBLE_DEVICES hides it
   */
  cuda_index: number | null;
  name: string | null;
  uuid: string | null;
  mig: boolean;
  total: number | null;
  used: number | null;
  free: number | null;
  util_gpu: number | null;
  util_mem: number | null;
  compute_capability: string | null;
  sm_count: number | null;
  /**
   * NVML's figure for this kernel's PID on this device (its host PID in a container, confirmed or probable); null when not listed
   */
  this_kernel: number | null;
  allocator: null | IAllocator;
  processes: IGpuProcess[];
  /**
   * power draw now, milliwatts (NVML); null when not measured (power_note says why)
   */
  power_mw?: number | null;
  /**
   * the enforced power limit, milliwatts (NVML); null when not measured
   */
  power_limit_mw?: number | null;
  /**
   * NVML's energy counter, millijoules since the driver loaded (Volta and newer); null without it
   */
  energy_mj?: number | null;
  /**
   * why a power figure is missing, or that energy is power × time; null when all are measured
   */
  power_note?: string | null;
  /**
   * NVML's figures summed for the processes started from this notebook on this device (not this kernel's own); null when none is listed. Added later
   */
  notebook_processes?: number | null;
  /**
   * NVML's figures summed for host PIDs one of which is this kernel (ambiguous): never counted as other processes; null when none. Added later
   */
  uncertain?: number | null;
}
/**
 * PyTorch caching-allocator statistics; present only when torch is imported and CUDA already initialised
 */
export interface IAllocator {
  allocated: number;
  reserved: number;
  peak_allocated: number;
  peak_reserved: number;
  num_ooms: number;
  num_alloc_retries: number;
}
export interface IGpuProcess {
  pid: number;
  name: string | null;
  used: number | null;
  /**
   * from a kernel-<id>.json in the process's command line
   */
  kernel_id: string | null;
  this_kernel: boolean;
  /**
   * who holds it: this kernel (its PID, or its host PID confirmed by tracking its reserved memory), probably this kernel (a host PID not yet confirmed), ambiguous (this kernel is one of several host PIDs), a process started from this notebook, another Jupyter kernel, or anything else; never counted as another process unless other_kernel or external. Added later: absent from older kernels (derive it from this_kernel and kernel_id)
   */
  relation?: 'this_kernel' | 'probably_this_kernel' | 'ambiguous' | 'notebook' | 'other_kernel' | 'external';
  /**
   * how a host PID was matched, in one line (e.g. 'this kernel is one of host PIDs 4000000, 4000001'); null when NVML listed the PID as it is
   */
  note?: string | null;
  /**
   * its PID in the kernel's own PID namespace (differs from pid in a container); with create_time it names the process for terminate. Null unless this kernel or started from this notebook
   */
  local_pid?: number | null;
  /**
   * the local process's start time (seconds since the epoch); null unless started from this notebook
   */
  create_time?: number | null;
  /**
   * command line of a process started from this notebook (first 300 characters); null otherwise
   */
  cmdline?: string | null;
  /**
   * its rank in a distributed run (torchrun, notebook_launcher), from RANK, LOCAL_RANK and WORLD_SIZE in its environment; null unless started from this notebook, of this user and with both RANK and WORLD_SIZE set. Added later
   */
  rank?: null | ISampleProcessRank;
}
export interface ISampleProcessRank {
  /**
   * RANK: its place among all the run's processes, below world_size
   */
  rank: number;
  /**
   * LOCAL_RANK: its place on this machine; null when unset
   */
  local_rank: number | null;
  /**
   * WORLD_SIZE: how many processes the run has
   */
  world_size: number;
}
export interface IKernelUsage {
  pid: number;
  gpu_used: number | null;
  torch: ITorchState;
}
export interface ITorchState {
  imported: boolean;
  version: string | null;
  cuda_initialized: boolean;
}
export interface IHostMemory {
  rss: number;
  total: number;
  available: number;
  children: IChildren;
  container_limit: number | null;
  container_usage: number | null;
}
/**
 * child processes of the kernel, recursively (DataLoader workers)
 */
export interface IChildren {
  count: number;
  /**
   * summed resident memory: counts the pages workers share with the kernel (fork) once per worker
   */
  rss: number;
  /**
   * summed unique memory (USS, what ending the workers would free); null when not measurable (no /proc/PID/smaps_rollup, access denied) or no workers; measured at most every few seconds per worker (added later)
   */
  uss?: number | null;
  /**
   * summed proportional set size (shared pages split between sharers); null where not measurable (added later)
   */
  pss?: number | null;
  /**
   * how fast the summed USS grows, bytes per minute over the last minute or so (copy-on-read of Python-object datasets); null until two measurements of a worker are apart (added later)
   */
  uss_growth_per_min?: number | null;
}
/**
 * Which of the user's variables hold GPU memory (gpumem_kernel/heldby), for the panel's "Held by": sent after each cell that ends with CUDA in use, and the last one again when a comm opens. Names, sizes and descriptions only.
 */
export interface IHoldersMessage {
  type: 'holders';
  /**
   * when the walk ended, seconds since the epoch
   */
  time: number;
  /**
   * the execution count of the cell after which the walk ran
   */
  cell: number | null;
  /**
   * the walk ran past its per-cell budget: no devices, and `note` says so
   */
  skipped: boolean;
  /**
   * why the walk was skipped, or what it left out
   */
  note: string | null;
  /**
   * which holders keep autograd graphs alive (their saved tensors count as not reachable)
   */
  history_hint: string | null;
  elapsed_ms: number;
  /**
   * the walk's time budget; null: none
   */
  budget_ms: number | null;
  devices: IHoldersDevice[];
}
export interface IHoldersDevice {
  /**
   * "cuda:0": torch's index, the sample's devices[].cuda_index
   */
  device: string;
  /**
   * the caching allocator's allocated bytes on the device at the walk; null: not known
   */
  allocated: number | null;
  /**
   * bytes on the device charged to a holder (all of them, not only those listed)
   */
  reachable: number;
  /**
   * allocated - reachable: not reachable from your variables (autograd graphs of tensors you kept, closures, caches); null: not known
   */
  unreachable: number | null;
  /**
   * the largest holders on the device, largest first
   *
   * @maxItems 20
   */
  entries: IHolderLine[];
  /**
   * holders on the device beyond those listed
   */
  more: number;
  /**
   * what they hold on it together
   */
  more_bytes: number;
  /**
   * of `unreachable`: what the holders' autograd graphs keep alive on the device (tensors saved for backward that no variable reaches); absent from older kernels
   */
  graph_bytes?: number;
}
export interface IHolderLine {
  /**
   * the variable, "Out" (IPython's output cache) or "sys.last_traceback"
   */
  name: string;
  source: 'variable' | 'ipython' | 'traceback';
  /**
   * "list of 40 tensors with grad history"
   */
  description: string;
  /**
   * charged on this device: storages no larger holder reached first
   */
  bytes: number;
  /**
   * on-device tensors it reaches, on every device
   */
  tensors: number;
  /**
   * other holders reaching some of the same storages
   */
  shared_with: string[];
  /**
   * kept alive on the device only through this holder's autograd graphs (a list of losses stored without .item()): in the device's `unreachable`, not in `bytes`; absent from older kernels
   */
  graph_bytes?: number;
}
/**
 * Written by gpumem_kernel/server/handlers.py:exit_payload from server/exits.py's KernelExit. Sizes are integer bytes; null where the server cannot tell.
 */
export interface IKernelExitAnswer {
  kernel_id: string;
  /**
   * The last death of the kernel process the browser named (its hello's pid), or null when the server saw none (yet).
   */
  exit: null | IKernelExit;
  /**
   * When the out-of-memory killer ended it: the host checklist, an oom.schema.json payload (the browser checks it with that schema).
   */
  checklist: {
    [k: string]: unknown;
  } | null;
}
export interface IKernelExit {
  kernel_id: string;
  pid: number;
  /**
   * when the server noticed the death, seconds since the epoch
   */
  time: number;
  /**
   * the exit status when the server reaped the process; negative: the signal number
   */
  returncode: number | null;
  /**
   * "SIGKILL", …; null when unknown or a normal exit
   */
  signal: string | null;
  oom_killed: boolean;
  /**
   * cgroup: a new kill in the kernel's memory cgroup; machine: only the machine's /proc/vmstat count rose
   */
  evidence: 'cgroup' | 'machine' | null;
  /**
   * new OOM kills counted at the death
   */
  kills: number;
  /**
   * the kernel's memory cgroup path
   */
  cgroup: string | null;
  /**
   * memory limit over the cgroup; null: none
   */
  limit: number | null;
  /**
   * the cgroup's highest memory usage (all its processes)
   */
  peak: number | null;
  /**
   * the kernel's RSS at the server's last look, within a second of the death
   */
  rss: number | null;
  /**
   * its child processes (DataLoader workers) at that look
   */
  children: number | null;
  /**
   * their summed RSS (pages they share with the kernel counted once per worker)
   */
  children_rss: number | null;
}
/**
 * Sizes are integer bytes; a field the message or probe cannot tell is null. Written by gpumem_kernel/oom/bundle.py:oom_bundle.
 */
export interface IOomPayload {
  version: 1;
  /**
   * @minItems 1
   */
  summary: string[];
  info: IOomInfo;
  diagnosis: IOomDiagnosis;
  /**
   * @minItems 1
   */
  steps: IOomStep[];
  occurrence?: IOomOccurrence;
  alive?: IOomAlive;
}
/**
 * The numbers of PyTorch's message (parse_oom_message); `format` cuda-error is any message without figures, whatever its family.
 */
export interface IOomInfo {
  format: '1.x' | '2.x' | 'cuda-error' | 'unknown';
  backend: 'CUDA' | 'HIP' | 'XPU';
  exception: string | null;
  message: string;
  tried_to_allocate: number | null;
  device: number | null;
  total_capacity: number | null;
  free: number | null;
  allowed: number | null;
  allocated_by_pytorch: number | null;
  private_pools: number | null;
  reserved_unallocated: number | null;
  reserved_total: number | null;
  this_process_total: number | null;
  other_processes: IOomProcessUse[];
  hint: 'expandable_segments' | 'max_split_size_mb' | null;
  /**
   * Which kind of out-of-memory error this is (gpumem_kernel/oom/patterns.json, classify.py): PyTorch's CUDA/HIP caching allocator, its Intel XPU and Apple MPS backends, a CUDA/HIP call outside the allocator, cuBLAS, cuDNN, NCCL, XLA (JAX/TensorFlow), a library that gave up (accelerate's batch-size finder, vLLM's KV cache), or the host's RAM. The steps follow it. Optional: outputs saved by older kernels have none (their format says: 1.x/2.x/unknown are cuda_allocator, cuda-error one of driver, cublas, cudnn).
   */
  family?:
    'cuda_allocator' | 'xpu' | 'mps' | 'driver' | 'cublas' | 'cudnn' | 'nccl' | 'xla' | 'wrapper' | 'host';
}
export interface IOomProcessUse {
  pid: number;
  used: number;
}
/**
 * What the message, a fresh probe and the user namespace say (diagnose).
 */
export interface IOomDiagnosis {
  device: number | null;
  too_large: boolean;
  fragmentation: null | IOomFragmentation;
  other_processes: IOomProcess[];
  pid_unmatched: boolean;
  traceback: null | IOomTraceback;
  host: null | IOomHost;
  loaders: IOomLoader[];
  num_workers: number | null;
  amp: 'likely' | 'unknown';
  bf16_supported: boolean | null;
  batch_size: number | null;
  batch_size_source: string | null;
  input_size: null | IOomInputSize;
  model: null | IOomModel;
  names: IOomNames;
  alloc_conf_var: 'PYTORCH_CUDA_ALLOC_CONF' | 'PYTORCH_HIP_ALLOC_CONF';
  alloc_conf: string | null;
  torch_version: string | null;
  notes: string[];
  /**
   * The causes the figures point at, strongest first (the steps follow this order); empty when they name none. Optional: outputs saved by older kernels have none.
   */
  causes?: IOomCause[];
  /**
   * Why the failed call ran with gradients off (evaluation or inference), one line of evidence: the `with torch.no_grad():` / decorator around the failing line, a Lightning evaluation step, or torch's grad mode; the step eval-batch-size then comes first. null: training, or nothing says. Optional: outputs saved by older kernels have none.
   */
  evaluation?: string | null;
  /**
   * host PIDs that are (or may be) this kernel in a container: the sample's this kernel, probably this kernel and ambiguous processes; left out of other_processes and never to be ended. Added later
   */
  this_kernel_pids?: number[];
}
export interface IOomFragmentation {
  reserved_unallocated: number;
  threshold: number;
  decisive: boolean;
  expandable_segments_set: boolean;
  suggest: boolean;
}
export interface IOomProcess {
  pid: number;
  used: number | null;
  name: string | null;
  kernel_id: string | null;
  /**
   * started from this notebook: a descendant of this kernel (a DataLoader worker that used CUDA, `!python train.py`, torchrun)
   */
  child_of_kernel: boolean;
  source: 'message' | 'probe' | 'both';
  /**
   * a process started from this notebook: its command line; null otherwise. Added later
   */
  cmdline?: string | null;
  /**
   * a process started from this notebook: its PID in the kernel's namespace (differs from pid, NVML's host PID, in a container); null otherwise. Added later
   */
  local_pid?: number | null;
}
export interface IOomTraceback {
  frames: number;
  tensors: number;
  bytes: number;
  by_device: IOomByDevice;
}
export interface IOomByDevice {
  [k: string]: number;
}
export interface IOomHost {
  rss: number | null;
  total: number | null;
  available: number | null;
  workers: number;
  workers_rss: number;
  /**
   * the workers' summed unique memory (USS) from the sample; null when not measured (added later)
   */
  workers_uss?: number | null;
  container_limit: number | null;
  container_usage: number | null;
  low: boolean;
}
export interface IOomLoader {
  name: string;
  batch_size: number | null;
  num_workers: number;
}
export interface IOomInputSize {
  name: string;
  value: number;
  kind: 'image' | 'sequence';
}
export interface IOomModel {
  name: string;
  type_name: string;
  parameters: number;
  bytes: number;
  blocks: string | null;
  blocks_kind: 'ModuleList' | 'Sequential' | null;
  hf_checkpointing: boolean;
  checkpointing_on: boolean;
}
export interface IOomNames {
  model: string;
  optimizer: string;
  loader: string;
  criterion: string;
  device: string;
}
/**
 * What the figures say caused the OOM. The checklist puts this cause's steps first (oom/order.py CAUSE_STEPS).
 */
export interface IOomCause {
  kind: 'too-large' | 'other-processes' | 'fragmentation' | 'traceback' | 'host-memory';
  /**
   * the request (too-large) or the memory that cause holds; null when unknown
   */
  bytes: number | null;
  /**
   * explains the OOM alone: that memory plus the free memory would have covered the request
   */
  decisive: boolean;
}
/**
 * One checklist step: a button (action), a cell to insert (code) or advice (action null).
 */
export interface IOomStep {
  id: string;
  title: string;
  detail: string;
  action: 'clear' | 'restart' | 'shutdown-kernel' | 'insert-cell' | 'insert-env-cell-and-restart' | null;
  kernel_id: string | null;
  code: string | null;
  /**
   * Why this step cannot help with this OOM (the browser folds it under "Not applicable here", the payload lists such steps last); null when it may help. Optional: outputs saved by older kernels have none.
   */
  not_applicable?: string | null;
  /**
   * What the fit advice (%gpumem analyze --advise, analysis.advise) computed for this step's lever, for the model that failed; null when it was not computed. Optional: outputs saved by older kernels have none.
   */
  figure?: IOomFigure | null;
}
/**
 * One row of the fit advice on the step that is its lever: the row's figures, to the byte, and one line saying them.
 */
export interface IOomFigure {
  /**
   * the advice row's key ("checkpointing", "amp-bf16")
   */
  key: string;
  /**
   * what the lever adds to %gpumem analyze ("--checkpointing")
   */
  flags: string;
  /**
   * the (micro-)batch the row analysed
   */
  batch: number;
  peak_bytes: number;
  peak_allocated_bytes: number | null;
  /**
   * the largest (micro-)batch that fits with the lever; null: no memory limit known
   */
  maximum: number | null;
  status: 'fits' | 'tight' | 'will-not-fit' | 'unknown';
  fits: boolean;
  /**
   * last-analysis: the last %gpumem analyze --advise of this model; computed: for this error (a small model)
   */
  source: 'last-analysis' | 'computed';
  /**
   * one line: "gradient checkpointing: peak 31.2 GiB → fits at batch 8 (up to 24)"
   */
  text: string;
}
/**
 * Which error the checklist is about: one out-of-memory error in one run of the kernel process. The browser keeps the checklist's ticks under `id` (a new error starts unticked; a reload keeps the ticks of the error still shown) and marks a checklist whose (kernel_pid, kernel_start) is not the connected kernel's hello (pid, create_time) as one of an earlier kernel run. Optional: outputs saved by older kernels have none.
 */
export interface IOomOccurrence {
  id: string;
  kernel_pid: number;
  /**
   * psutil create_time of the kernel process, as hello's create_time; null when unknown
   */
  kernel_start: number | null;
  /**
   * when the checklist was built, seconds since the epoch
   */
  time: number;
}
/**
 * What was alive on the device when the allocation failed, from PyTorch's allocator snapshot taken at the OOM (the setting "oomTimeline": the kernel records a bounded allocator history while cells run). Optional: absent when the setting is off, CUDA was not in use when the cell started, or this torch lacks the private API; outputs saved by older kernels have none.
 */
export interface IOomAlive {
  /**
   * the full timeline the kernel keeps for `timeline_export` (the last few of this kernel run), or null
   */
  timeline_id: string | null;
  /**
   * CUDA device index
   */
  device: number | null;
  /**
   * bytes in live blocks at the error (the allocator's blocks, as torch.cuda.memory_allocated counts them)
   */
  allocated: number;
  /**
   * live blocks at the error
   */
  blocks: number;
  /**
   * the largest groups of live blocks (same category and allocating line), largest first
   *
   * @maxItems 20
   */
  holders: IOomAliveHolder[];
  /**
   * the groups beyond `holders`, summed; null when none
   */
  rest: null | IOomAliveRest;
  /**
   * the allocation that failed, null when the snapshot did not record it
   */
  failed: null | IOomAliveFailed;
  /**
   * one line each: how the snapshot was taken, what is a heuristic
   */
  notes: string[];
}
export interface IOomAliveHolder {
  size: number;
  count: number;
  /**
   * a heuristic from the allocating frames and the block's lifetime (PyTorch records none)
   */
  category: 'parameter' | 'gradient' | 'optimizer_state' | 'activation' | 'input' | 'other';
  source: null | IOomAliveSource;
}
/**
 * the line that allocated it: the innermost frame of the user's own code (user true), else the innermost recorded frame (user false)
 */
export interface IOomAliveSource {
  file: string;
  line: number;
  name: string;
  /**
   * the execution count when the file is a notebook cell (shown as "In [N], line L"), else null
   */
  cell: number | null;
  user: boolean;
}
export interface IOomAliveRest {
  size: number;
  count: number;
}
export interface IOomAliveFailed {
  /**
   * the requested allocation
   */
  size: number;
  device_free: number | null;
  source: null | IOomAliveSource;
}
export interface IOpenMessage {
  type: 'open';
  protocol: number;
  interval?: number;
  history_seconds?: number;
  client?: string;
}
export interface IReply {
  type: 'reply';
  id: string;
  action:
    | 'snapshot'
    | 'history'
    | 'configure'
    | 'children'
    | 'processes'
    | 'terminate'
    | 'ping'
    | 'timeline_export';
  result: {
    [k: string]: unknown;
  };
}
export interface IHistoryResult {
  samples: ISample[];
}
export interface IConfigureResult {
  interval: number;
  history_seconds: number;
}
export interface IChildrenResult {
  children: IChildProcess[];
}
export interface IChildProcess {
  pid: number;
  create_time: number;
  name: string | null;
  rss: number | null;
  /**
   * NVML bytes on all devices; 0: a GPU is visible and does not list it; null: no GPU, or NVML gave no figure
   */
  gpu_used: number | null;
}
export interface IProcessesResult {
  processes: IProcessState[];
}
export interface IProcessState {
  pid: number;
  /**
   * as asked
   */
  create_time: number;
  /**
   * the PID runs (not a zombie)
   */
  alive: boolean;
  /**
   * alive and started at create_time (within 0.01 s): not a reused PID
   */
  same_process: boolean;
  /**
   * null unless same_process
   */
  name: string | null;
  /**
   * as in child; null unless same_process
   */
  gpu_used: number | null;
}
export interface ITerminateResult {
  terminated: number[];
  refused: IRefusal[];
}
export interface IRefusal {
  pid: number;
  reason: string;
}
export interface IPingResult {}
/**
 * one file made from a timeline the kernel holds, for the browser to download
 */
export interface ITimelineExportResult {
  /**
   * as asked
   */
  id: string;
  /**
   * as asked
   */
  format: 'snapshot' | 'csv';
  /**
   * a suggested file name, e.g. gpumem-timeline-tl-1a2b3c4d.pickle or .csv
   */
  filename: string;
  /**
   * application/octet-stream (snapshot pickle) or text/csv
   */
  media_type: string;
  /**
   * the file's bytes, base64 (RFC 4648, with padding)
   */
  data: string;
  /**
   * the file's size before base64
   */
  bytes: number;
}
export interface IRequestMessage {
  type: 'request';
  id: string;
  /**
   * v1: snapshot | history | configure | children | processes | terminate | ping | timeline_export; unknown actions are answered with an error
   */
  action: string;
  args?: {
    [k: string]: unknown;
  };
}
export interface IConfigureArgs {
  interval?: number;
  history_seconds?: number;
  /**
   * the JupyterLab setting "Batch-size rounding": how this kernel's analyze/autobatch picks are rounded down when the command gives no --round: pow2, none or N (a multiple of N); sent only to kernels whose hello lists the capability "rounding"
   */
  rounding?: string;
  /**
   * the JupyterLab setting "Sequence-length multiple": the tokens this kernel's `%gpumem analyze --search seq` steps in when the command gives no --seq-multiple; sent only to kernels whose hello lists the capability "seq_multiple"
   */
  seq_multiple?: number;
  /**
   * the JupyterLab setting "oomTimeline" (Capture the timeline at an out-of-memory error): while cells run, record a bounded CUDA allocator history (Python stacks, about 2 µs per allocation event) and attach what was alive to the OOM checklist; sent only to kernels whose hello lists the capability "oom_timeline"
   */
  oom_timeline?: boolean;
}
export interface INoArgs {}
export interface IProcessArgs {
  /**
   * @maxItems 1024
   */
  pids: IProcessRef[];
}
/**
 * a process: its PID and its start time (psutil create_time, seconds since the epoch), which tells a reused PID apart
 */
export interface IProcessRef {
  pid: number;
  create_time: number;
}
/**
 * a timeline this kernel run holds (the `id` of a timeline payload) and the file to make of it: `snapshot` (PyTorch's memory snapshot pickle, what pytorch.org/memory_viz opens) or `csv` (one row per allocation); sent only to kernels whose hello lists the capability "timeline"
 */
export interface ITimelineExportArgs {
  id: string;
  format: 'snapshot' | 'csv';
}
/**
 * Written by gpumem_kernel/timeline/ (TimelinePayload): what was alive over one recorded cell (`%%gpumem --timeline`, CUDA allocator history) or one predicted training step (`%gpumem analyze ... --timeline`, the traced step). Time is the allocation-event index, as in PyTorch's memory_viz. Sizes are integer bytes; null: not known.
 */
export interface ITimelinePayload {
  version: 1;
  /**
   * names the full history the kernel keeps for `timeline_export` (bounded: the last few timelines of this kernel run)
   */
  id: string;
  /**
   * recorded: PyTorch's allocator history of a CUDA device; predicted: the traced training step replayed through our allocator model (no GPU used)
   */
  source: 'recorded' | 'predicted';
  /**
   * what was recorded: a cell ("In [5]") or a step ("resnet50, batch 32, AdamW, bf16")
   */
  title: string;
  device: ITimelineDevice;
  /**
   * seconds since the epoch
   */
  created: number;
  /**
   * allocation and free events in the full history
   */
  events_total: number;
  /**
   * events the recording lost (PyTorch's ring buffer was full); 0 for a predicted step
   */
  events_dropped: number;
  /**
   * allocations smaller than this are not drawn one by one but summed per category in `small`; 0: every allocation is a band
   */
  min_band_bytes: number;
  /**
   * bytes already allocated when the recording began and not freed in it, drawn under the bands (recorded: from the segment snapshot; predicted: 0, since the step's own parameters are bands)
   */
  baseline: number;
  /**
   * the event index where the timeline ends (the x axis runs 0..end)
   */
  end: number;
  peak: ITimelinePeak;
  /**
   * allocations of at least min_band_bytes, in order of allocation: each is one tensor's storage (count 1)
   *
   * @maxItems 4000
   */
  bands: ITimelineBand[];
  /**
   * the step series of allocations below min_band_bytes, summed per category: a point holds from its `at` to the next point's; downsampled keeping every local maximum, so the peak is exact
   *
   * @maxItems 4000
   */
  small: ITimelineSmallPoint[];
  /**
   * the allocator's reserved bytes as a step series (segments), or null when unknown
   *
   * @maxItems 4000
   */
  reserved: ITimelineSeriesPoint[] | null;
  /**
   * what is alive at the peak, largest first, grouped by (category, allocating source line); its sizes sum to peak.bytes exactly (the last row may be 'the rest', stack null, when more than 200 groups)
   *
   * @maxItems 201
   */
  alive_at_peak: ITimelineHolder[];
  /**
   * deduplicated call stacks that bands, holders and `failed` point at by index
   *
   * @maxItems 4000
   */
  stacks: ITimelineStack[];
  /**
   * the allocation that ran out of memory when the timeline was captured at an OOM, else null
   */
  failed: null | ITimelineFailed;
  /**
   * one line each: what was downsampled, dropped or could not be attributed
   */
  notes: string[];
}
export interface ITimelineDevice {
  /**
   * the GPU recorded on, or the target GPU of a prediction
   */
  name: string | null;
  /**
   * CUDA device index (recorded), null for a prediction
   */
  index: number | null;
  total: number | null;
}
export interface ITimelinePeak {
  /**
   * allocated bytes at the peak, baseline included
   */
  bytes: number;
  /**
   * the event index of the peak (first time it is reached)
   */
  at: number;
  /**
   * reserved bytes at that moment
   */
  reserved: number | null;
}
export interface ITimelineBand {
  size: number;
  category: ITimelineCategory;
  /**
   * event index of its allocation
   */
  start: number;
  /**
   * event index of its free; null: still alive at the end
   */
  end: number | null;
  /**
   * index into stacks; null: no frames recorded
   */
  stack: number | null;
}
export interface ITimelineSmallPoint {
  at: number;
  bytes: ITimelineByCategory;
}
export interface ITimelineByCategory {
  parameter: number;
  gradient: number;
  optimizer_state: number;
  activation: number;
  input: number;
  other: number;
}
export interface ITimelineSeriesPoint {
  at: number;
  bytes: number;
}
export interface ITimelineHolder {
  size: number;
  /**
   * allocations in this group
   */
  count: number;
  category: ITimelineCategory;
  /**
   * index into stacks (the group's allocating stack); null: no frames, or 'the rest'
   */
  stack: number | null;
  /**
   * true for the one row that sums the groups beyond the first 200
   */
  rest: boolean;
}
export interface ITimelineStack {
  /**
   * innermost first, as PyTorch records them
   *
   * @maxItems 64
   */
  frames: ITimelineFrame[];
  /**
   * index in frames of the innermost user frame: the line that allocated it; null when no frame is the user's
   */
  source: number | null;
}
export interface ITimelineFrame {
  file: string;
  line: number;
  name: string;
  /**
   * the execution count when the frame is a notebook cell (shown as "In [N], line L"), else null
   */
  cell: number | null;
  /**
   * the user's own code: not torch, not another installed library, not Python's standard library, not gpumem_kernel, not IPython
   */
  user: boolean;
}
export interface ITimelineFailed {
  /**
   * the requested allocation
   */
  size: number;
  device_free: number | null;
  stack: number | null;
}
/**
 * What a `%gpumem watch` widget is told besides the panel's `history` and `sample` messages (gpumem_kernel/watchwidget/session.py): exactly one of its fields is set.
 */
export interface IWatchEvent {
  type: 'watch_event';
  /**
   * The watch no longer updates, and why (it keeps its last picture).
   */
  stopped: string | null;
  /**
   * The payload of a CUDA out-of-memory error in a cell that ended since the watch started.
   */
  oom: IOomPayload | null;
  /**
   * The report of "Clear GPU memory", asked for from the widget.
   */
  clear: IClearPayload | null;
  /**
   * One line: a request the kernel could not serve.
   */
  error: string | null;
}
