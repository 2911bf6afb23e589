/*
 * GENERATED FILE: do not edit. Made by scripts/gen_wire.mjs (`jlpm gen:wire`) from
 * gpumem_kernel/wire/schemas/*.schema.json, the one source of the wire format; change a schema, then run it.
 */

/**
 * One check per schema the browser reads: `check(value, 'sample')` is null when the value fits, else one
 * line naming the first field that does not. Made of the keyword functions in ../keywords.ts; fields the
 * schema does not name are ignored (README.md beside the schemas, "Extra fields").
 */
import {
  type Check,
  additionalProperties,
  all,
  array,
  constant,
  enumOf,
  integer,
  maxItems,
  minItems,
  nullable,
  number,
  object,
  optional,
  pattern,
  properties,
  propertyNames,
  string,
  type,
  uniqueItems,
  when
} from '../keywords';

const c1: Check = integer(10, 3600);

const c2: Check = nullable(string());

const c3: Check = nullable(number());

/** hello.schema.json */
export const hello: Check = object({
  type: constant('hello'),
  protocol: integer(1),
  version: string(),
  pid: integer(0),
  capabilities: all(array(string()), uniqueItems),
  interval: number(0.1, 60),
  history_seconds: c1,
  python: string(),
  ipykernel: c2,
  torch: c2,
  create_time: optional(c3)
});

const c4: Check = constant('history');

const c5: Check = nullable(integer(0));

const c6: Check = nullable(integer(0, 100));

/** sample.schema.json#/$defs/allocator */
const allocator: Check = object({
  allocated: integer(0),
  reserved: integer(0),
  peak_allocated: integer(0),
  peak_reserved: integer(0),
  num_ooms: integer(0),
  num_alloc_retries: integer(0)
});

/** sample.schema.json#/$defs/process_rank */
const sampleProcessRank: Check = object({ rank: integer(0), local_rank: c5, world_size: integer(1) });

/** sample.schema.json#/$defs/process */
const gpuProcess: Check = object({
  pid: integer(0),
  name: c2,
  used: c5,
  kernel_id: c2,
  this_kernel: type('boolean'),
  relation: optional(
    enumOf('this_kernel', 'probably_this_kernel', 'ambiguous', 'notebook', 'other_kernel', 'external')
  ),
  note: optional(c2),
  local_pid: optional(c5),
  create_time: optional(c3),
  cmdline: optional(c2),
  rank: optional(nullable(sampleProcessRank))
});

/** sample.schema.json#/$defs/device */
const device: Check = object({
  nvml_index: integer(0),
  cuda_index: c5,
  name: c2,
  uuid: c2,
  mig: type('boolean'),
  total: c5,
  used: c5,
  free: c5,
  util_gpu: c6,
  util_mem: c6,
  compute_capability: nullable(all(string(), pattern(new RegExp('^[0-9]+\\.[0-9]+$', 'u')))),
  sm_count: c5,
  this_kernel: c5,
  allocator: nullable(allocator),
  processes: array(gpuProcess),
  power_mw: optional(c5),
  power_limit_mw: optional(c5),
  energy_mj: optional(c5),
  power_note: optional(c2),
  notebook_processes: optional(c5),
  uncertain: optional(c5)
});

const c7: Check = nullable(integer());

/** sample.schema.json */
export const sample: Check = object({
  type: constant('sample'),
  seq: integer(0),
  time: number(),
  gpu: object({
    available: type('boolean'),
    reason: c2,
    driver_version: c2,
    cuda_driver_version: c2,
    visible_devices: c2,
    device_order: enumOf('FASTEST_FIRST', 'PCI_BUS_ID'),
    devices: array(device)
  }),
  kernel: object({
    pid: integer(0),
    gpu_used: c5,
    torch: object({ imported: type('boolean'), version: c2, cuda_initialized: type('boolean') })
  }),
  host: object({
    rss: integer(0),
    total: integer(0),
    available: integer(0),
    children: object({
      count: integer(0),
      rss: integer(0),
      uss: optional(c5),
      pss: optional(c5),
      uss_growth_per_min: optional(c7)
    }),
    container_limit: c5,
    container_usage: c5
  }),
  errors: array(string())
});

/** history.schema.json */
export const history: Check = object({ type: c4, samples: array(sample) });

/** reply.schema.json#/$defs/history_result */
export const historyResult: Check = object({ samples: array(sample) });

/** reply.schema.json#/$defs/configure_result */
export const configureResult: Check = object({ interval: number(0.1, 60), history_seconds: c1 });

/** reply.schema.json#/$defs/child */
const childProcess: Check = object({
  pid: integer(1),
  create_time: number(),
  name: c2,
  rss: c5,
  gpu_used: c5
});

/** reply.schema.json#/$defs/children_result */
export const childrenResult: Check = object({ children: array(childProcess) });

/** reply.schema.json#/$defs/process_state */
const processState: Check = object({
  pid: integer(1),
  create_time: number(),
  alive: type('boolean'),
  same_process: type('boolean'),
  name: c2,
  gpu_used: c5
});

/** reply.schema.json#/$defs/processes_result */
export const processesResult: Check = object({ processes: array(processState) });

const c8: Check = array(integer(1));

/** reply.schema.json#/$defs/refusal */
const refusal: Check = object({ pid: integer(), reason: string() });

/** reply.schema.json#/$defs/terminate_result */
export const terminateResult: Check = object({ terminated: c8, refused: array(refusal) });

/** reply.schema.json#/$defs/ping_result */
export const pingResult: Check = object({});

const c9: Check = all(string(), pattern(new RegExp('^tl-[0-9a-f]{8,32}$', 'u')));

/** reply.schema.json#/$defs/timeline_export_result */
export const timelineExportResult: Check = object({
  id: c9,
  format: enumOf('snapshot', 'csv'),
  filename: string(1),
  media_type: string(1),
  data: string(),
  bytes: integer(0)
});

/** reply.schema.json */
export const reply: Check = all(
  object({
    type: constant('reply'),
    id: string(1),
    action: enumOf(
      'snapshot',
      'history',
      'configure',
      'children',
      'processes',
      'terminate',
      'ping',
      'timeline_export'
    ),
    result: type('object')
  }),
  when(properties({ action: constant('snapshot') }, []), properties({ result: sample }, [])),
  when(properties({ action: c4 }, []), properties({ result: historyResult }, [])),
  when(properties({ action: constant('configure') }, []), properties({ result: configureResult }, [])),
  when(properties({ action: constant('children') }, []), properties({ result: childrenResult }, [])),
  when(properties({ action: constant('processes') }, []), properties({ result: processesResult }, [])),
  when(properties({ action: constant('terminate') }, []), properties({ result: terminateResult }, [])),
  when(properties({ action: constant('ping') }, []), properties({ result: pingResult }, [])),
  when(
    properties({ action: constant('timeline_export') }, []),
    properties({ result: timelineExportResult }, [])
  )
);

/** error.schema.json */
export const errorMessage: Check = object({
  type: constant('error'),
  id: c2,
  code: enumOf('bad-request', 'unknown-action', 'internal'),
  message: string(1)
});

/** growth.schema.json#/$defs/running */
const runningGrowth: Check = object({
  device: string(1),
  cell: c7,
  rate: integer(0),
  allocated: integer(0),
  since: number(),
  seconds: number(0),
  samples: integer(2),
  full_in: c3
});

/** growth.schema.json#/$defs/holder */
const growingHolder: Check = object({
  name: string(1),
  bytes: integer(),
  tensors: integer(),
  description: string()
});

/** growth.schema.json#/$defs/rerun */
const rerunGrowth: Check = object({
  cell: c7,
  cell_id: c2,
  device: string(1),
  step: integer(0),
  reserved_step: integer(),
  runs: integer(3),
  runs_left: c5,
  holders: all(array(growingHolder), maxItems(5)),
  pattern: enumOf(
    'loss_with_graph',
    'eval_with_graph',
    'outputs_with_graph',
    'output_cache',
    'kept_old_object',
    null
  ),
  fix: c2
});

/** growth.schema.json */
export const growth: Check = object({
  type: constant('growth'),
  time: number(),
  running: nullable(runningGrowth),
  rerun: nullable(rerunGrowth)
});

/** clear.schema.json#/$defs/by_device */
const clearByDevice: Check = all(type('object'), additionalProperties(integer(0)));

/** clear.schema.json#/$defs/holder */
const clearHolder: Check = object({
  name: string(),
  kind: enumOf('tensor', 'module', 'optimizer', 'list', 'tuple', 'dict', 'set', 'traceback', 'other'),
  type_name: string(),
  bytes: integer(0),
  by_device: clearByDevice,
  tensors: integer(0),
  shape: nullable(array(integer(0))),
  dtype: c2,
  graph_by_device: optional(clearByDevice)
});

const c10: Check = array(clearHolder);

/** clear.schema.json#/$defs/device */
const clearDevice: Check = object({
  device: all(string(), pattern(new RegExp('^cuda:[0-9]+$', 'u'))),
  name: c2,
  allocated_before: c5,
  allocated_after: c5,
  reserved_before: c5,
  reserved_after: c5,
  this_kernel_before: c5,
  this_kernel_after: c5
});

/** clear.schema.json */
export const clearPayload: Check = object({
  version: constant(1),
  dry_run: type('boolean'),
  torch_imported: type('boolean'),
  cuda_initialized: type('boolean'),
  traceback_sources: array(string()),
  traceback_frames: integer(0),
  traceback_freed: nullable(clearHolder),
  output_cache: c10,
  output_cache_entries: integer(0),
  deleted: c10,
  gc_collected: c5,
  emptied_cache: type('boolean'),
  devices: array(clearDevice),
  host_rss_before: c5,
  host_rss_after: c5,
  holders: c10,
  holders_more: integer(0),
  notes: array(string()),
  reclaimed: all(
    type('object'),
    additionalProperties(c7),
    propertyNames(pattern(new RegExp('^cuda:[0-9]+$', 'u')))
  )
});

/** oom.schema.json#/$defs/info */
const oomInfo: Check = object({
  format: enumOf('1.x', '2.x', 'cuda-error', 'unknown'),
  backend: enumOf('CUDA', 'HIP', 'XPU'),
  exception: c2,
  message: string(undefined, 2000),
  tried_to_allocate: c5,
  device: c5,
  total_capacity: c5,
  free: c5,
  allowed: c5,
  allocated_by_pytorch: c5,
  private_pools: c5,
  reserved_unallocated: c5,
  reserved_total: c5,
  this_process_total: c5,
  other_processes: array(object({ pid: integer(0), used: integer(0) })),
  hint: enumOf('expandable_segments', 'max_split_size_mb', null),
  family: optional(
    enumOf('cuda_allocator', 'xpu', 'mps', 'driver', 'cublas', 'cudnn', 'nccl', 'xla', 'wrapper', 'host')
  )
});

/** oom.schema.json#/$defs/fragmentation */
const oomFragmentation: Check = object({
  reserved_unallocated: integer(0),
  threshold: integer(0),
  decisive: type('boolean'),
  expandable_segments_set: type('boolean'),
  suggest: type('boolean')
});

/** oom.schema.json#/$defs/process */
const oomProcess: Check = object({
  pid: integer(0),
  used: c5,
  name: c2,
  kernel_id: c2,
  child_of_kernel: type('boolean'),
  source: enumOf('message', 'probe', 'both'),
  cmdline: optional(c2),
  local_pid: optional(c5)
});

/** oom.schema.json#/$defs/by_device */
const oomByDevice: Check = all(type('object'), additionalProperties(integer(0)));

/** oom.schema.json#/$defs/traceback */
const oomTraceback: Check = object({
  frames: integer(0),
  tensors: integer(0),
  bytes: integer(0),
  by_device: oomByDevice
});

/** oom.schema.json#/$defs/host */
const oomHost: Check = object({
  rss: c5,
  total: c5,
  available: c5,
  workers: integer(0),
  workers_rss: integer(0),
  workers_uss: optional(c5),
  container_limit: c5,
  container_usage: c5,
  low: type('boolean')
});

/** oom.schema.json#/$defs/loader */
const oomLoader: Check = object({ name: string(), batch_size: c5, num_workers: integer(0) });

const c11: Check = nullable(type('boolean'));

const c12: Check = nullable(integer(1));

/** oom.schema.json#/$defs/input_size */
const oomInputSize: Check = object({ name: string(), value: integer(1), kind: enumOf('image', 'sequence') });

/** oom.schema.json#/$defs/model */
const oomModel: Check = object({
  name: string(),
  type_name: string(),
  parameters: integer(0),
  bytes: integer(0),
  blocks: c2,
  blocks_kind: enumOf('ModuleList', 'Sequential', null),
  hf_checkpointing: type('boolean'),
  checkpointing_on: type('boolean')
});

/** oom.schema.json#/$defs/names */
const oomNames: Check = object({
  model: string(),
  optimizer: string(),
  loader: string(),
  criterion: string(),
  device: string()
});

/** oom.schema.json#/$defs/cause */
const oomCause: Check = object({
  kind: enumOf('too-large', 'other-processes', 'fragmentation', 'traceback', 'host-memory'),
  bytes: c5,
  decisive: type('boolean')
});

/** oom.schema.json#/$defs/diagnosis */
const oomDiagnosis: Check = object({
  device: c5,
  too_large: type('boolean'),
  fragmentation: nullable(oomFragmentation),
  other_processes: array(oomProcess),
  pid_unmatched: type('boolean'),
  traceback: nullable(oomTraceback),
  host: nullable(oomHost),
  loaders: array(oomLoader),
  num_workers: c5,
  amp: enumOf('likely', 'unknown'),
  bf16_supported: c11,
  batch_size: c12,
  batch_size_source: c2,
  input_size: nullable(oomInputSize),
  model: nullable(oomModel),
  names: oomNames,
  alloc_conf_var: enumOf('PYTORCH_CUDA_ALLOC_CONF', 'PYTORCH_HIP_ALLOC_CONF'),
  alloc_conf: c2,
  torch_version: c2,
  notes: array(string()),
  causes: optional(array(oomCause)),
  evaluation: optional(c2),
  this_kernel_pids: optional(array(integer(0)))
});

const c13: Check = enumOf('fits', 'tight', 'will-not-fit', 'unknown');

/** oom.schema.json#/$defs/figure */
const oomFigure: Check = object({
  key: all(string(), pattern(new RegExp('^[a-z0-9+-]+$', 'u'))),
  flags: string(),
  batch: integer(1),
  peak_bytes: integer(0),
  peak_allocated_bytes: c5,
  maximum: c5,
  status: c13,
  fits: type('boolean'),
  source: enumOf('last-analysis', 'computed'),
  text: string(1, 300)
});

/** oom.schema.json#/$defs/step */
const oomStep: Check = all(
  object({
    id: all(string(), pattern(new RegExp('^[a-z0-9-]+$', 'u'))),
    title: string(1),
    detail: string(),
    action: enumOf('clear', 'restart', 'shutdown-kernel', 'insert-cell', 'insert-env-cell-and-restart', null),
    kernel_id: c2,
    code: c2,
    not_applicable: optional(c2),
    figure: optional(nullable(oomFigure))
  }),
  when(properties({ action: constant('shutdown-kernel') }, []), properties({ kernel_id: string(1) }, [])),
  when(
    properties({ action: enumOf('insert-cell', 'insert-env-cell-and-restart') }, []),
    properties({ code: string(1) }, [])
  )
);

/** oom.schema.json#/$defs/occurrence */
const oomOccurrence: Check = object({
  id: string(1, 64),
  kernel_pid: integer(0),
  kernel_start: c3,
  time: number()
});

/** oom.schema.json#/$defs/alive_source */
const oomAliveSource: Check = object({
  file: string(),
  line: integer(0),
  name: string(),
  cell: c5,
  user: type('boolean')
});

const c14: Check = nullable(oomAliveSource);

/** oom.schema.json#/$defs/alive_holder */
const oomAliveHolder: Check = object({
  size: integer(0),
  count: integer(1),
  category: enumOf('parameter', 'gradient', 'optimizer_state', 'activation', 'input', 'other'),
  source: c14
});

/** oom.schema.json#/$defs/alive */
const oomAlive: Check = object({
  timeline_id: nullable(all(string(), pattern(new RegExp('^tl-[0-9a-f]{8,32}$', 'u')))),
  device: c5,
  allocated: integer(0),
  blocks: integer(0),
  holders: all(array(oomAliveHolder), maxItems(20)),
  rest: nullable(object({ size: integer(0), count: integer(0) })),
  failed: nullable(object({ size: integer(0), device_free: c5, source: c14 })),
  notes: array(string())
});

/** oom.schema.json */
export const oomPayload: Check = object({
  version: constant(1),
  summary: all(array(string()), minItems(1)),
  info: oomInfo,
  diagnosis: oomDiagnosis,
  steps: all(array(oomStep), minItems(1)),
  occurrence: optional(oomOccurrence),
  alive: optional(oomAlive)
});

const c15: Check = enumOf('traced', 'measured');

const c16: Check = all(type('object'), additionalProperties(integer(0)));

const c17: Check = all(string(), pattern(new RegExp('^(pow2|none|[1-9][0-9]*)$', 'u')));

const c18: Check = enumOf('option', 'setting', 'default');

const c19: Check = number(0, 1, 'min');

const c20: Check = enumOf('traced');

/** analysis.schema.json */
export const analysisPayload: Check = object({
  version: constant(1),
  engine: c15,
  model: object({
    name: string(),
    parameter_count: integer(0),
    trainable_parameter_count: integer(0),
    parameters_by_dtype: c16,
    buffers_by_dtype: c16,
    largest_layer: object({ name: string(), bytes: integer(0) })
  }),
  settings: object({
    batch_size: integer(1),
    input: string(),
    loss: string(),
    optimizer: string(),
    amp: enumOf(null, 'fp16', 'bf16'),
    grad_accum: integer(1),
    checkpointing: type('boolean'),
    device: c2,
    target: c2,
    memory: c2,
    world_size: integer(1),
    strategy: enumOf(null, 'ddp', 'fsdp', 'zero1', 'zero2', 'zero3'),
    multiple: c12,
    effective_batch: integer(1),
    round: optional(c17),
    round_source: optional(c18),
    step_autocast: optional(object({ device_type: string(), amp: enumOf('fp16', 'bf16') })),
    pick_shares: optional(object({ recommended: c19, safe: c19 })),
    seq: optional(c12),
    search: optional(enumOf('batch', 'seq'))
  }),
  parameters_bytes: integer(0),
  buffers_bytes: integer(0),
  gradients_bytes: integer(0),
  optimizer_bytes: integer(0),
  optimizer_host_bytes: integer(0),
  optimizer_transient_bytes: integer(0),
  activations_bytes: integer(0),
  input_bytes: integer(0),
  autocast_cache_bytes: integer(0),
  temporary_bytes: integer(0),
  peak_live_bytes: integer(0),
  peak_allocated_bytes: integer(),
  peak_reserved_bytes: c7,
  context_bytes: integer(0),
  workspace_bytes: integer(0),
  peak_bytes: integer(),
  figures: array(
    object({
      name: string(),
      bytes: c5,
      engine: enumOf('read', 'traced', 'measured', 'modelled', 'estimate', 'nvml', 'source'),
      note: string()
    })
  ),
  breakdown_at_peak: nullable(
    object({
      parameter: integer(0),
      buffer: integer(0),
      gradient: integer(0),
      optimizer_state: integer(0),
      input: integer(0),
      activation: integer(0),
      autocast_cache: integer(0),
      temporary: integer(0)
    })
  ),
  phase_peaks: nullable(
    all(
      type('object'),
      additionalProperties(integer(0)),
      propertyNames(enumOf('input', 'forward', 'backward', 'optimizer', 'zero_grad', 'other'))
    )
  ),
  peak_phase: enumOf(null, 'input', 'forward', 'backward', 'optimizer', 'zero_grad', 'other'),
  amp_saved_bytes: c7,
  allocator: nullable(
    object({
      segments: integer(0),
      small_segments: integer(0),
      large_segments: integer(0),
      fragmentation: number(0, 1)
    })
  ),
  device: object({
    name: c2,
    source: enumOf('nvml', 'target', 'memory', 'none'),
    total_bytes: c5,
    free_bytes: c5,
    reclaimable_bytes: integer(0),
    reserve_bytes: c5,
    limit_bytes: c5,
    compute_capability: c2,
    bf16: c11,
    context_bytes: integer(0),
    context_source: enumOf('estimate', 'nvml', 'in use', 'none'),
    context_basis: string()
  }),
  curve: array(
    object({
      batch_size: integer(1),
      peak_bytes: integer(),
      peak_allocated_bytes: integer(),
      peak_reserved_bytes: c7,
      engine: c15
    })
  ),
  fit: nullable(
    object({
      intercept_bytes: number(),
      slope_bytes_per_sample: number(),
      max_relative_residual: c3,
      points: integer(0)
    })
  ),
  recommendations: object({
    maximum: c5,
    recommended: c5,
    safe: c5,
    rounding: string(),
    extrapolated: type('boolean'),
    note: string(),
    current: object({ batch_size: integer(1), peak_bytes: integer(), status: c13, fraction_of_limit: c3 }),
    accumulation: object({
      target_effective_batch: integer(1),
      explicit_target: type('boolean'),
      maximum: c5,
      recommended: c5,
      safe: c5
    }),
    lr: object({
      from_effective_batch: integer(1),
      to_effective_batch: c5,
      linear: c3,
      sqrt: c3,
      hint: string()
    })
  }),
  distributed: nullable(
    object({
      world_size: integer(1),
      strategy: enumOf('ddp', 'fsdp', 'zero1', 'zero2', 'zero3'),
      parameters_bytes: integer(0),
      gradients_bytes: integer(0),
      optimizer_bytes: integer(0),
      extra_bytes: integer(0),
      extra_note: string(),
      activations_bytes: integer(0),
      peak_bytes: integer(),
      note: string(),
      engine: optional(enumOf('traced', 'formula'))
    })
  ),
  error_bound: object({ relative: number(0), absolute_bytes: integer(0), statement: string() }),
  notes: array(string()),
  elapsed_seconds: number(0),
  config_yaml: optional(string()),
  accumulation_code: optional(c2),
  evaluation: optional(
    nullable(
      object({
        batch: integer(1),
        training_batch: integer(1),
        peak_live_bytes: integer(0),
        peak_allocated_bytes: integer(),
        peak_reserved_bytes: integer(),
        peak_bytes: integer(),
        activations_bytes: integer(0),
        input_bytes: integer(0),
        max_batch: c5,
        rule_of_thumb_batch: integer(1),
        engine: c20,
        note: string()
      })
    )
  ),
  llm: optional(
    nullable(
      object({
        attention: c2,
        attention_path: optional(c2),
        checkpointing: nullable(object({ blocks: integer(1), kind: string(), names: string() })),
        logits: nullable(
          object({
            vocab: integer(1),
            seq: integer(0),
            batch: integer(1),
            dtype: string(),
            logits_bytes: integer(0),
            upcast_bytes: integer(0),
            log_softmax_bytes: integer(0),
            other_bytes: integer(0),
            backward_bytes: integer(0),
            held_bytes: integer(0),
            at_peak_bytes: integer(0),
            formula_bytes: integer(0)
          })
        ),
        notes: array(string())
      })
    )
  ),
  sequence_search: optional(
    nullable(
      object({
        multiple: integer(1),
        multiple_source: c18,
        context: c12,
        engine: c20,
        results: array(
          object({
            batch: integer(1),
            maximum: c5,
            recommended: c12,
            safe: c12,
            extrapolated: type('boolean'),
            note: string(),
            curve: array(object({ seq: integer(1), peak_bytes: integer() })),
            variable: optional(
              nullable(
                object({
                  every_length: integer(0),
                  peak_bytes: integer(),
                  allocated_bytes: integer(),
                  checked: c8,
                  extra_traces: integer(0),
                  complete: type('boolean'),
                  dip: nullable(
                    object({
                      shorter: integer(1),
                      longer: integer(1),
                      shorter_bytes: integer(),
                      longer_bytes: integer()
                    })
                  )
                })
              )
            )
          })
        )
      })
    )
  ),
  advice: optional(
    object({
      peak_bytes: integer(0),
      status: c13,
      target: c2,
      recommended: c5,
      reason: c2,
      rows: array(
        object({
          key: string(),
          lever: string(),
          flags: string(),
          command: string(),
          cost: string(),
          cost_kind: enumOf('none', 'compute', 'precision', 'training', 'gpus', 'hardware'),
          peak_bytes: c5,
          peak_allocated_bytes: c5,
          maximum: c5,
          maximum_of: enumOf('batch', 'sequence'),
          status: c13,
          fits: type('boolean'),
          per_rank: type('boolean'),
          note: c2
        })
      )
    })
  )
});

/** autobatch.schema.json */
export const autobatchPayload: Check = object({
  version: constant(1),
  maximum: integer(0),
  recommended: integer(0),
  margin: number(0, 1, 'max'),
  rounding: string(),
  round: optional(c17),
  round_source: optional(c18),
  trials: array(
    object({
      batch: integer(1),
      ok: type('boolean'),
      peak_bytes: c5,
      seconds: number(0),
      reserved_bytes: c5,
      phase: enumOf('start', 'predicted', 'grow', 'shrink', 'slope', 'secant', 'edge', 'bisect', 'scan'),
      error: c2
    })
  ),
  n_trials: integer(0),
  seconds: number(0),
  engine: enumOf('cuda', 'simulated'),
  device: string(),
  limit_bytes: c5,
  steps: integer(2),
  start_batch: integer(1),
  start_source: enumOf('start_batch', 'analysis', 'default'),
  predicted: c5,
  model_name: string(),
  optimizer: string(),
  amp: enumOf('fp16', 'bf16', null),
  at_least: type('boolean'),
  interrupted: type('boolean'),
  notes: array(string()),
  config_yaml: optional(string())
});

const c21: Check = nullable(number(0));

/** benchmark.schema.json#/$defs/pick */
const benchmarkPick: Check = object({
  kind: enumOf('highest_throughput', 'best_efficiency', 'recommended', 'most_energy_efficient'),
  row: integer(0),
  batch_size: integer(1),
  num_workers: integer(0),
  amp: type('boolean'),
  pin_memory: type('boolean'),
  samples_per_s: number(0),
  peak_bytes: c5,
  efficiency: c21,
  gpu_util: c21,
  note: string(),
  energy_per_sample_j: optional(c21)
});

const c22: Check = nullable(benchmarkPick);

const c23: Check = array(integer());

/** benchmark.schema.json */
export const benchmarkPayload: Check = object({
  version: constant(1),
  engine: enumOf('cuda', 'cpu', 'simulated'),
  device: object({ type: enumOf('cuda', 'cpu'), index: c5, name: string(), total_bytes: c5 }),
  limit_bytes: c5,
  memory_target: c19,
  memory_source: string(),
  amp_dtype: enumOf('float16', 'bfloat16'),
  config: object({
    batch_sizes: all(array(integer(1)), minItems(1)),
    num_workers_options: all(array(integer(0)), minItems(1)),
    steps_per_test: integer(1),
    warmup_steps: integer(0),
    test_mixed_precision: type('boolean'),
    test_pin_memory: type('boolean'),
    memory_target: c19
  }),
  model: object({ name: string(), parameter_count: integer(0) }),
  optimizer: string(),
  data: string(),
  rows: array(
    object({
      batch_size: integer(1),
      num_workers: integer(0),
      amp: type('boolean'),
      pin_memory: type('boolean'),
      status: enumOf('ok', 'oom', 'swapping-suspected'),
      io_ms: c21,
      h2d_ms: c21,
      forward_ms: c21,
      backward_ms: c21,
      optimizer_ms: c21,
      total_ms: c21,
      samples_per_s: c21,
      gpu_util: c21,
      peak_bytes: c5,
      peak_allocated_bytes: c5,
      peak_reserved_bytes: c5,
      device_used_bytes: c5,
      efficiency: c21,
      energy_per_sample_j: optional(c21),
      mean_power_w: optional(c21),
      loader_restarts: integer(0),
      seconds: number(0),
      error: c2
    })
  ),
  picks: object({
    highest_throughput: c22,
    best_efficiency: c22,
    recommended: c22,
    most_energy_efficient: optional(c22)
  }),
  diagnostics: array(string()),
  notes: array(string()),
  interrupted: type('boolean'),
  seconds: number(0),
  workers: object({ leftover: c23, terminated: c23 }),
  config_yaml: optional(c2)
});

/** timeline.schema.json#/$defs/device */
const timelineDevice: Check = object({ name: c2, index: c5, total: c5 });

/** timeline.schema.json#/$defs/peak */
const timelinePeak: Check = object({ bytes: integer(0), at: integer(0), reserved: c5 });

/** timeline.schema.json#/$defs/category */
const timelineCategory: Check = enumOf(
  'parameter',
  'gradient',
  'optimizer_state',
  'activation',
  'input',
  'other'
);

/** timeline.schema.json#/$defs/band */
const timelineBand: Check = object({
  size: integer(1),
  category: timelineCategory,
  start: integer(0),
  end: c5,
  stack: c5
});

/** timeline.schema.json#/$defs/by_category */
const timelineByCategory: Check = object({
  parameter: integer(0),
  gradient: integer(0),
  optimizer_state: integer(0),
  activation: integer(0),
  input: integer(0),
  other: integer(0)
});

/** timeline.schema.json#/$defs/small_point */
const timelineSmallPoint: Check = object({ at: integer(0), bytes: timelineByCategory });

/** timeline.schema.json#/$defs/series_point */
const timelineSeriesPoint: Check = object({ at: integer(0), bytes: integer(0) });

/** timeline.schema.json#/$defs/holder */
const timelineHolder: Check = object({
  size: integer(0),
  count: integer(1),
  category: timelineCategory,
  stack: c5,
  rest: type('boolean')
});

/** timeline.schema.json#/$defs/frame */
const timelineFrame: Check = object({
  file: string(),
  line: integer(0),
  name: string(),
  cell: c5,
  user: type('boolean')
});

/** timeline.schema.json#/$defs/stack */
const timelineStack: Check = object({ frames: all(array(timelineFrame), maxItems(64)), source: c5 });

/** timeline.schema.json#/$defs/failed */
const timelineFailed: Check = object({ size: integer(0), device_free: c5, stack: c5 });

/** timeline.schema.json */
export const timelinePayload: Check = object({
  version: constant(1),
  id: c9,
  source: enumOf('recorded', 'predicted'),
  title: string(),
  device: timelineDevice,
  created: number(),
  events_total: integer(0),
  events_dropped: integer(0),
  min_band_bytes: integer(0),
  baseline: integer(0),
  end: integer(0),
  peak: timelinePeak,
  bands: all(array(timelineBand), maxItems(4000)),
  small: all(array(timelineSmallPoint), maxItems(4000)),
  reserved: nullable(all(array(timelineSeriesPoint), maxItems(4000))),
  alive_at_peak: all(array(timelineHolder), maxItems(201)),
  stacks: all(array(timelineStack), maxItems(4000)),
  failed: nullable(timelineFailed),
  notes: array(string())
});

/** kernel_exit.schema.json#/$defs/exit */
const kernelExit: Check = object({
  kernel_id: string(),
  pid: integer(0),
  time: number(),
  returncode: c7,
  signal: c2,
  oom_killed: type('boolean'),
  evidence: enumOf('cgroup', 'machine', null),
  kills: integer(0),
  cgroup: c2,
  limit: c5,
  peak: c5,
  rss: c5,
  children: c5,
  children_rss: c5
});

/** kernel_exit.schema.json */
export const kernelExitAnswer: Check = object({
  kernel_id: string(),
  exit: nullable(kernelExit),
  checklist: nullable(type('object'))
});

/** holders.schema.json#/$defs/entry */
const holderLine: Check = object({
  name: string(1),
  source: enumOf('variable', 'ipython', 'traceback'),
  description: string(),
  bytes: integer(0),
  tensors: integer(0),
  shared_with: array(string()),
  graph_bytes: optional(integer(0))
});

/** holders.schema.json#/$defs/device */
const holdersDevice: Check = object({
  device: string(1),
  allocated: c5,
  reachable: integer(0),
  unreachable: c5,
  entries: all(array(holderLine), maxItems(20)),
  more: integer(0),
  more_bytes: integer(0),
  graph_bytes: optional(integer(0))
});

/** holders.schema.json */
export const holdersMessage: Check = object({
  type: constant('holders'),
  time: number(),
  cell: c7,
  skipped: type('boolean'),
  note: c2,
  history_hint: c2,
  elapsed_ms: number(0),
  budget_ms: c21,
  devices: array(holdersDevice)
});

/** watch_event.schema.json */
export const watchEvent: Check = object({
  type: constant('watch_event'),
  stopped: c2,
  oom: nullable(oomPayload),
  clear: nullable(clearPayload),
  error: c2
});
