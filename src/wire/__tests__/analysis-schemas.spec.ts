/**
 * @jest-environment node
 *
 * The analysis / autobatch / benchmark checks (src/wire/analysispayload.ts, generated from
 * gpumem_kernel/wire/schemas/{analysis,autobatch,benchmark}.schema.json) against those schemas run by Ajv, as
 * schemas.spec.ts does for the comm messages: the real fixtures are valid under both, and for every targeted
 * mutation both agree. Extra fields are the one difference, by design: the schemas as written (what the kernel
 * must send) refuse them, the browser ignores them (README.md beside the schemas, "Extra fields").
 */
import * as fs from 'fs';
import * as path from 'path';

import { analysisPayloadProblem, autobatchPayloadProblem, benchmarkPayloadProblem } from '../analysispayload';
import { kernelRule, mutate } from './schemaajv';

const FIXTURE_DIR = path.join(__dirname, '..', '..', '__tests__', 'fixtures');

type Kind = 'analysis' | 'autobatch' | 'benchmark';
type Json = Record<string, unknown>;

const CHECKS: Record<Kind, (value: unknown) => string | null> = {
  analysis: analysisPayloadProblem,
  autobatch: autobatchPayloadProblem,
  benchmark: benchmarkPayloadProblem
};

function valid(kind: Kind, data: unknown): boolean {
  return kernelRule(`${kind}.schema.json`, data);
}

function fixture(name: string): Json {
  return JSON.parse(fs.readFileSync(path.join(FIXTURE_DIR, `${name}.json`), 'utf8')) as Json;
}

const FIXTURES = fs
  .readdirSync(FIXTURE_DIR)
  .filter(f => f.endsWith('.json'))
  .map(f => f.replace(/\.json$/, ''));

describe('the renderer fixtures', () => {
  it('cover the three payloads', () => {
    for (const kind of ['analysis', 'autobatch', 'benchmark']) {
      expect(FIXTURES.some(f => f.startsWith(`${kind}_`))).toBe(true);
    }
  });

  it.each(FIXTURES)('%s is valid under the schema and the check', name => {
    const kind = name.split('_')[0] as Kind;
    const data = fixture(name);
    expect(valid(kind, data)).toBe(true);
    expect(CHECKS[kind](data)).toBeNull();
  });
});

const analysisMutations: Array<[string, unknown]> = [
  ['version', 2],
  ['engine', 'guessed'],
  ['engine', undefined],
  ['model.name', null],
  ['model.parameter_count', -1],
  ['model.parameters_by_dtype', { float32: 'many' }],
  ['model.buffers_by_dtype', []],
  ['model.largest_layer', { name: 'x' }],
  ['settings.batch_size', 0],
  ['settings.amp', 'fp8'],
  ['settings.amp', null],
  ['settings.device', 3],
  ['settings.strategy', 'zero4'],
  ['settings.strategy', 'fsdp'],
  ['settings.multiple', 0],
  ['settings.multiple', 8],
  ['settings.effective_batch', 1.5],
  ['parameters_bytes', 1.5],
  ['peak_allocated_bytes', -5],
  ['peak_reserved_bytes', null],
  ['peak_reserved_bytes', '1 GiB'],
  ['peak_bytes', -1],
  ['figures.0.bytes', null],
  ['figures.0.bytes', -1],
  ['figures.0.engine', 'guess'],
  ['figures.0.note', undefined],
  ['breakdown_at_peak', null],
  ['breakdown_at_peak.activation', -1],
  ['phase_peaks', null],
  ['phase_peaks', { forward: 1, sleep: 2 }],
  ['phase_peaks', { forward: -1 }],
  ['peak_phase', null],
  ['peak_phase', 'sleep'],
  ['amp_saved_bytes', -1048576],
  ['amp_saved_bytes', 0.5],
  ['allocator', null],
  ['allocator.fragmentation', 1.5],
  ['device.source', 'guess'],
  ['device.total_bytes', null],
  ['device.limit_bytes', -1],
  ['device.bf16', 'yes'],
  ['device.context_source', 'in use'],
  ['device.context_source', 'unknown'],
  ['curve', []],
  ['curve.0.batch_size', 0],
  ['curve.0.peak_reserved_bytes', null],
  ['curve.0.engine', 'estimate'],
  ['fit', null],
  ['fit.max_relative_residual', null],
  ['fit.points', -1],
  ['recommendations.maximum', null],
  ['recommendations.maximum', -1],
  ['recommendations.extrapolated', 'no'],
  ['recommendations.current.status', 'great'],
  ['recommendations.current.fraction_of_limit', null],
  ['recommendations.accumulation.target_effective_batch', 0],
  ['recommendations.accumulation.recommended', null],
  ['recommendations.lr.to_effective_batch', null],
  ['recommendations.lr.linear', 'x2'],
  ['recommendations.lr.hint', undefined],
  ['distributed', { world_size: 2 }],
  [
    'distributed',
    {
      world_size: 4,
      strategy: 'zero3',
      parameters_bytes: 1,
      gradients_bytes: 1,
      optimizer_bytes: 1,
      extra_bytes: 0,
      extra_note: '',
      activations_bytes: 1,
      peak_bytes: 10,
      note: ''
    }
  ],
  ['error_bound.relative', -0.1],
  ['error_bound.absolute_bytes', 1.5],
  ['notes', [1]],
  ['notes', []],
  ['elapsed_seconds', -1]
];

const autobatchMutations: Array<[string, unknown]> = [
  ['version', 0],
  ['maximum', -1],
  ['maximum', 0],
  ['margin', 1],
  ['margin', 0],
  ['margin', -0.1],
  ['trials', []],
  ['trials.0.batch', 0],
  ['trials.0.ok', 1],
  ['trials.0.peak_bytes', null],
  ['trials.0.phase', 'guess'],
  ['trials.0.phase', 'bisect'],
  ['trials.0.error', 3],
  ['engine', 'cpu'],
  ['engine', 'cuda'],
  ['limit_bytes', null],
  ['steps', 1],
  ['start_source', 'guess'],
  ['predicted', null],
  ['predicted', -3],
  ['amp', 'bf16'],
  ['amp', 'fp32'],
  ['at_least', null],
  ['notes', 'one'],
  ['seconds', undefined]
];

const benchmarkMutations: Array<[string, unknown]> = [
  ['version', '1'],
  ['engine', 'tpu'],
  ['device.type', 'mps'],
  ['device.index', -1],
  ['device.index', 0],
  ['device.total_bytes', null],
  ['limit_bytes', null],
  ['memory_target', 0],
  ['memory_target', 1],
  ['memory_target', 1.2],
  ['amp_dtype', 'fp16'],
  ['config.batch_sizes', []],
  ['config.batch_sizes', [0]],
  ['config.num_workers_options', [-1]],
  ['config.steps_per_test', 0],
  ['config.warmup_steps', 0],
  ['config.test_pin_memory', 'yes'],
  ['config.memory_target', 0],
  ['model.parameter_count', null],
  ['rows', []],
  ['rows.0.status', 'slow'],
  ['rows.0.status', 'swapping-suspected'],
  ['rows.0.io_ms', -1],
  ['rows.0.io_ms', null],
  ['rows.0.gpu_util', 37.5],
  ['rows.0.peak_bytes', 1.5],
  ['rows.0.efficiency', null],
  ['rows.0.loader_restarts', -1],
  ['rows.0.error', 5],
  ['rows.0.seconds', null],
  ['picks.recommended', null],
  ['picks.recommended.kind', 'fastest'],
  ['picks.recommended.row', -1],
  ['picks.recommended.samples_per_s', null],
  ['picks.recommended.note', undefined],
  ['diagnostics', [null]],
  ['interrupted', 'no'],
  ['workers.leftover', [123]],
  ['workers.leftover', ['123']],
  ['workers', { leftover: [] }]
];

describe('the generated checks agree with the schemas', () => {
  it.each(analysisMutations)('analysis.%s = %p', (at, value) => {
    for (const name of ['analysis_target', 'analysis_nogpu']) {
      const data = mutate(fixture(name), at, value);
      expect(analysisPayloadProblem(data) === null).toBe(valid('analysis', data));
    }
  });

  it.each(autobatchMutations)('autobatch.%s = %p', (at, value) => {
    const data = mutate(fixture('autobatch_simulated'), at, value);
    expect(autobatchPayloadProblem(data) === null).toBe(valid('autobatch', data));
  });

  it.each(benchmarkMutations)('benchmark.%s = %p', (at, value) => {
    const data = mutate(fixture('benchmark_simulated'), at, value);
    expect(benchmarkPayloadProblem(data) === null).toBe(valid('benchmark', data));
  });

  it('some mutations are rejected (the lists test both ways)', () => {
    const rejected = analysisMutations.filter(
      ([at, v]) => analysisPayloadProblem(mutate(fixture('analysis_target'), at, v)) !== null
    );
    expect(rejected.length).toBeGreaterThan(20);
    expect(rejected.length).toBeLessThan(analysisMutations.length);
  });

  it('extra fields: ignored here (additive changes), refused by the schemas as written', () => {
    for (const [kind, name] of [
      ['analysis', 'analysis_target'],
      ['autobatch', 'autobatch_simulated'],
      ['benchmark', 'benchmark_simulated']
    ] as const) {
      const extra = mutate(fixture(name), 'future_field', 1);
      expect(CHECKS[kind](extra)).toBeNull();
      expect(valid(kind, extra)).toBe(false);
    }
  });
});
