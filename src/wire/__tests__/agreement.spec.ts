/**
 * @jest-environment node
 *
 * The generated validators (src/wire/generated/validators.ts) decide as Ajv does on the schemas themselves,
 * with fields a schema does not name ignored (README.md beside the schemas, "Extra fields"): for every schema
 * the browser reads, every single change of real messages and payloads (each field deleted or set to each of
 * a list of edge values, an extra field in each object) and random pairs of changes are accepted or refused by
 * both alike.
 */
import * as fs from 'fs';
import * as path from 'path';

import * as checks from '../generated/validators';
import type { Check } from '../keywords';
import * as fx from '../../__tests__/fixtures';
import * as payloads from '../../__tests__/payloads';
import { browserRule, kernelRule } from './schemaajv';

const FIXTURE_DIR = path.join(__dirname, '..', '..', '__tests__', 'fixtures');

function fixture(name: string): unknown {
  return JSON.parse(fs.readFileSync(path.join(FIXTURE_DIR, `${name}.json`), 'utf8')) as unknown;
}

/** A small deterministic pseudo-random generator (mulberry32), so a failure can be replayed. */
function random(start: number): () => number {
  let state = start;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type Json = unknown;
type Path = ReadonlyArray<string | number>;

/** Every place in a JSON value (the root included). */
function places(value: Json, at: Path = []): Path[] {
  const here: Path[] = [at];
  if (Array.isArray(value)) {
    value.forEach((item, i) => here.push(...places(item, [...at, i])));
  } else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      here.push(...places(item, [...at, key]));
    }
  }
  return here;
}

function clone(value: Json): Json {
  return value === undefined ? undefined : (JSON.parse(JSON.stringify(value)) as Json);
}

function get(value: Json, at: Path): Json {
  return at.reduce<Json>((node, key) => (node as Record<string | number, Json>)[key], value);
}

const EDGE_VALUES: ReadonlyArray<Json> = [
  null,
  true,
  false,
  0,
  -1,
  1,
  1.5,
  0.05,
  100,
  101,
  3600,
  2 ** 53,
  '',
  'x',
  '8.9',
  'cuda:0',
  'gpu',
  'traced',
  'sample',
  'x'.repeat(2001),
  '\u{1F600}'.repeat(1000),
  [],
  [1],
  ['a', 'a'],
  [null],
  {},
  { a: 1 }
];

/**
 * Every single change of `data`, each shown to `visit` and undone: each field deleted or set to each edge
 * value, an extra field in each object, the whole value replaced by each edge value.
 */
function eachSingleChange(data: Json, visit: (changed: Json) => void): void {
  for (const value of EDGE_VALUES) {
    visit(clone(value));
  }
  for (const at of places(data)) {
    const here = get(data, at);
    if (here !== null && typeof here === 'object' && !Array.isArray(here)) {
      const fields = here as Record<string, Json>;
      fields.future_field = { any: ['thing'] };
      visit(data);
      delete fields.future_field;
    }
    if (at.length === 0) {
      continue;
    }
    const parent = get(data, at.slice(0, -1)) as Record<string | number, Json>;
    const key = at[at.length - 1];
    const original = parent[key];
    if (!Array.isArray(parent)) {
      delete parent[key];
      visit(data);
    }
    for (const value of EDGE_VALUES) {
      parent[key] = clone(value);
      visit(data);
    }
    parent[key] = original;
  }
}

/** Two random changes of `base`: a field replaced by an edge value or by another field's value, or deleted. */
function twoChanges(base: Json, next: () => number): Json {
  const data = JSON.parse(JSON.stringify(base)) as Json;
  const pick = <T>(items: ReadonlyArray<T>): T => items[Math.floor(next() * items.length)];
  for (let change = 0; change < 2; change++) {
    const all = places(data).filter(at => at.length > 0);
    if (all.length === 0) {
      break;
    }
    const at = pick(all);
    const parent = get(data, at.slice(0, -1)) as Record<string | number, Json>;
    const roll = next();
    if (roll < 0.2 && !Array.isArray(parent)) {
      delete parent[at[at.length - 1]];
    } else if (roll < 0.5) {
      parent[at[at.length - 1]] = clone(get(data, pick(all)));
    } else {
      parent[at[at.length - 1]] = clone(pick(EDGE_VALUES));
    }
  }
  return data;
}

const CASES: ReadonlyArray<[string, Check, string, ReadonlyArray<Json>]> = [
  ['hello', checks.hello, 'hello.schema.json', [fx.hello, fx.helloWithoutCreateTime()]],
  ['sample', checks.sample, 'sample.schema.json', [fx.sample(), fx.noGpuSample()]],
  [
    'history',
    checks.history,
    'history.schema.json',
    [{ type: 'history', samples: [fx.sample()] }, fx.history()]
  ],
  [
    'reply',
    checks.reply,
    'reply.schema.json',
    [
      fx.snapshotReply(),
      fx.configureReply(),
      { type: 'reply', id: 'r-2', action: 'children', result: fx.childrenResult() },
      { type: 'reply', id: 'r-3', action: 'processes', result: fx.processesResult() },
      { type: 'reply', id: 'r-4', action: 'terminate', result: fx.terminateResult() },
      { type: 'reply', id: 'r-5', action: 'ping', result: {} }
    ]
  ],
  ['error', checks.errorMessage, 'error.schema.json', [fx.errorReply(), fx.errorReply(null)]],
  [
    'children result',
    checks.childrenResult,
    'reply.schema.json#/$defs/children_result',
    [fx.childrenResult()]
  ],
  [
    'processes result',
    checks.processesResult,
    'reply.schema.json#/$defs/processes_result',
    [fx.processesResult()]
  ],
  [
    'terminate result',
    checks.terminateResult,
    'reply.schema.json#/$defs/terminate_result',
    [fx.terminateResult()]
  ],
  [
    'configure result',
    checks.configureResult,
    'reply.schema.json#/$defs/configure_result',
    [{ interval: 1, history_seconds: 600 }]
  ],
  [
    'history result',
    checks.historyResult,
    'reply.schema.json#/$defs/history_result',
    [{ samples: [fx.sample()] }]
  ],
  ['ping result', checks.pingResult, 'reply.schema.json#/$defs/ping_result', [{}]],
  ['clear', checks.clearPayload, 'clear.schema.json', [payloads.clearGpu(), payloads.clearHoldersCpu()]],
  ['oom', checks.oomPayload, 'oom.schema.json', [payloads.oomWithOtherKernel(), payloads.oom1x()]],
  [
    'analysis',
    checks.analysisPayload,
    'analysis.schema.json',
    ['analysis_target', 'analysis_nogpu', 'analysis_accum'].map(fixture)
  ],
  [
    'autobatch',
    checks.autobatchPayload,
    'autobatch.schema.json',
    ['autobatch_simulated', 'autobatch_scan'].map(fixture)
  ],
  [
    'benchmark',
    checks.benchmarkPayload,
    'benchmark.schema.json',
    ['benchmark_interrupted', 'benchmark_simulated'].map(fixture)
  ]
];

describe('the generated validators decide as Ajv does on the schemas', () => {
  it.each(CASES)('%s: the real data is valid under both', (_, check, ref, bases) => {
    for (const base of bases) {
      const data = fx.wire(base);
      expect(kernelRule(ref, data)).toBe(true);
      expect(check(data, 'x')).toBeNull();
    }
  });

  function agree(name: string, check: Check, ref: string, data: Json): boolean {
    const problem = check(data, name);
    const expected = browserRule(ref, data);
    if ((problem === null) !== expected) {
      throw new Error(
        `${name}: the generated validator says ${problem ?? 'valid'}, Ajv says ${expected ? 'valid' : 'invalid'}, ` +
          `for ${JSON.stringify(data).slice(0, 2000)}`
      );
    }
    if (problem !== null && problem.includes('\n')) {
      throw new Error(`${name}: a problem of more than one line: ${problem}`);
    }
    return problem === null;
  }

  it.each(CASES)('%s: every single change of the real data', (name, check, ref, bases) => {
    let accepted = 0;
    let total = 0;
    const data = fx.wire(bases[0]);
    eachSingleChange(data, changed => {
      accepted += agree(name, check, ref, changed) ? 1 : 0;
      total++;
    });
    expect(data).toEqual(fx.wire(bases[0])); // every change was undone
    // The changes test both ways.
    expect(accepted).toBeGreaterThan(0);
    expect(accepted).toBeLessThan(total);
  });

  it.each(CASES)('%s: 1000 random pairs of changes', (name, check, ref, bases) => {
    const next = random(name.length * 7919);
    for (let i = 0; i < 1000; i++) {
      agree(name, check, ref, twoChanges(fx.wire(bases[i % bases.length]), next));
    }
  });
});
