#!/usr/bin/env node
/**
 * Generates the browser's side of the wire format from its one source, the JSON Schemas in
 * gpumem_kernel/wire/schemas/*.schema.json:
 *
 * - src/wire/generated/types.ts: the TypeScript types of every message and payload (json-schema-to-typescript);
 * - src/wire/generated/validators.ts: one check per schema the browser reads, written ahead of time as calls of
 *   the keyword functions in src/wire/keywords.ts, so nothing is compiled in the browser.
 *
 *   node scripts/gen_wire.mjs            (jlpm gen:wire)           write both files
 *   node scripts/gen_wire.mjs --check    (jlpm gen:wire --check)   write nothing; exit 1 when a file is out of date
 *
 * Both files are formatted with the repository's Prettier settings, so the output is stable. The validators
 * ignore `additionalProperties: false` (the browser ignores fields it does not know: README.md beside the
 * schemas, "Extra fields"); every other keyword is checked as the schema says, and a keyword this generator
 * does not know stops it, rather than being skipped.
 */
/* global console, process */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { compile } from 'json-schema-to-typescript';
import * as prettier from 'prettier';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SCHEMA_DIR = path.join(ROOT, 'gpumem_kernel', 'wire', 'schemas');
const OUT_DIR = path.join(ROOT, 'src', 'wire', 'generated');
const SCHEMA_SUFFIX = '.schema.json';

const HEADER = `/*
 * GENERATED FILE: do not edit. Made by scripts/gen_wire.mjs (\`jlpm gen:wire\`) from
 * gpumem_kernel/wire/schemas/*.schema.json, the one source of the wire format; change a schema, then run it.
 */
`;

/**
 * The TypeScript name of each object shape, by schema file and JSON pointer (names the rest of src/ uses).
 * A shape not listed gets `I` + its file and path in PascalCase (e.g. IAnalysisRecommendationsCurrent, IClearByDevice).
 */
const TYPE_NAMES = {
  hello: 'IHello',
  history: 'IHistory',
  sample: 'ISample',
  'sample#/properties/gpu': 'IGpuInfo',
  'sample#/properties/kernel': 'IKernelUsage',
  'sample#/properties/kernel/properties/torch': 'ITorchState',
  'sample#/properties/host': 'IHostMemory',
  'sample#/properties/host/properties/children': 'IChildren',
  'sample#/$defs/device': 'IDevice',
  'sample#/$defs/process': 'IGpuProcess',
  'sample#/$defs/allocator': 'IAllocator',
  reply: 'IReply',
  'reply#/$defs/history_result': 'IHistoryResult',
  'reply#/$defs/configure_result': 'IConfigureResult',
  'reply#/$defs/children_result': 'IChildrenResult',
  'reply#/$defs/processes_result': 'IProcessesResult',
  'reply#/$defs/terminate_result': 'ITerminateResult',
  'reply#/$defs/ping_result': 'IPingResult',
  'reply#/$defs/timeline_export_result': 'ITimelineExportResult',
  'reply#/$defs/child': 'IChildProcess',
  'reply#/$defs/process_state': 'IProcessState',
  'reply#/$defs/refusal': 'IRefusal',
  error: 'IErrorMessage',
  growth: 'IGrowth',
  'growth#/$defs/running': 'IRunningGrowth',
  'growth#/$defs/rerun': 'IRerunGrowth',
  'growth#/$defs/holder': 'IGrowingHolder',
  open: 'IOpenMessage',
  request: 'IRequestMessage',
  'request#/$defs/configure_args': 'IConfigureArgs',
  'request#/$defs/no_args': 'INoArgs',
  'request#/$defs/process_args': 'IProcessArgs',
  'request#/$defs/process_ref': 'IProcessRef',
  'request#/$defs/timeline_export_args': 'ITimelineExportArgs',
  clear: 'IClearPayload',
  'clear#/$defs/holder': 'IClearHolder',
  'clear#/$defs/device': 'IClearDevice',
  oom: 'IOomPayload',
  'oom#/$defs/info': 'IOomInfo',
  'oom#/$defs/info/properties/other_processes/items': 'IOomProcessUse',
  'oom#/$defs/fragmentation': 'IOomFragmentation',
  'oom#/$defs/process': 'IOomProcess',
  'oom#/$defs/traceback': 'IOomTraceback',
  'oom#/$defs/host': 'IOomHost',
  'oom#/$defs/loader': 'IOomLoader',
  'oom#/$defs/input_size': 'IOomInputSize',
  'oom#/$defs/model': 'IOomModel',
  'oom#/$defs/names': 'IOomNames',
  'oom#/$defs/diagnosis': 'IOomDiagnosis',
  'oom#/$defs/step': 'IOomStep',
  analysis: 'IAnalysisPayload',
  'analysis#/properties/model': 'IAnalysisModel',
  'analysis#/properties/settings': 'IAnalysisSettings',
  'analysis#/properties/figures/items': 'IFigure',
  'analysis#/properties/breakdown_at_peak': 'IBreakdownAtPeak',
  'analysis#/properties/allocator': 'IAllocatorSummary',
  'analysis#/properties/device': 'IAnalysisDevice',
  'analysis#/properties/curve/items': 'ICurvePoint',
  'analysis#/properties/fit': 'IFit',
  'analysis#/properties/recommendations': 'IRecommendations',
  'analysis#/properties/distributed/anyOf/1': 'IDistributed',
  'analysis#/properties/error_bound': 'IErrorBound',
  'analysis#/properties/advice': 'IAdvice',
  'analysis#/properties/advice/properties/rows/items': 'IAdviceRow',
  autobatch: 'IAutobatchPayload',
  'autobatch#/properties/trials/items': 'ITrial',
  benchmark: 'IBenchmarkPayload',
  'benchmark#/properties/config': 'IBenchmarkConfig',
  'benchmark#/properties/rows/items': 'IBenchmarkRow',
  'benchmark#/$defs/pick': 'IBenchmarkPick',
  timeline: 'ITimelinePayload',
  'timeline#/$defs/device': 'ITimelineDevice',
  'timeline#/$defs/peak': 'ITimelinePeak',
  'timeline#/$defs/band': 'ITimelineBand',
  'timeline#/$defs/by_category': 'ITimelineByCategory',
  'timeline#/$defs/small_point': 'ITimelineSmallPoint',
  'timeline#/$defs/series_point': 'ITimelineSeriesPoint',
  'timeline#/$defs/holder': 'ITimelineHolder',
  'timeline#/$defs/frame': 'ITimelineFrame',
  'timeline#/$defs/stack': 'ITimelineStack',
  'timeline#/$defs/failed': 'ITimelineFailed',
  kernel_exit: 'IKernelExitAnswer',
  'kernel_exit#/$defs/exit': 'IKernelExit',
  holders: 'IHoldersMessage',
  'holders#/$defs/device': 'IHoldersDevice',
  'holders#/$defs/entry': 'IHolderLine',
  watch_event: 'IWatchEvent'
};

/**
 * The schemas the browser reads (kernel → browser messages, reply results, output payloads), by the name of
 * the check validators.ts exports. The browser only sends `open` and `request`: they get types, no check.
 */
const BROWSER_READS = {
  hello: 'hello',
  history: 'history',
  sample: 'sample',
  reply: 'reply',
  errorMessage: 'error',
  growth: 'growth',
  historyResult: 'reply#/$defs/history_result',
  configureResult: 'reply#/$defs/configure_result',
  childrenResult: 'reply#/$defs/children_result',
  processesResult: 'reply#/$defs/processes_result',
  terminateResult: 'reply#/$defs/terminate_result',
  pingResult: 'reply#/$defs/ping_result',
  timelineExportResult: 'reply#/$defs/timeline_export_result',
  clearPayload: 'clear',
  oomPayload: 'oom',
  analysisPayload: 'analysis',
  autobatchPayload: 'autobatch',
  benchmarkPayload: 'benchmark',
  timelinePayload: 'timeline',
  kernelExitAnswer: 'kernel_exit',
  holdersMessage: 'holders',
  watchEvent: 'watch_event'
};

/** Keywords that assert nothing about a value. */
const ANNOTATIONS = new Set([
  '$schema',
  '$id',
  '$comment',
  'title',
  'description',
  'default',
  'examples',
  '$defs'
]);

// ---------------------------------------------------------------------------------------------------------
// reading the schemas

function loadSchemas() {
  const schemas = new Map();
  for (const file of fs.readdirSync(SCHEMA_DIR).sort()) {
    if (file.endsWith(SCHEMA_SUFFIX)) {
      schemas.set(
        file.slice(0, -SCHEMA_SUFFIX.length),
        JSON.parse(fs.readFileSync(path.join(SCHEMA_DIR, file), 'utf8'))
      );
    }
  }
  return schemas;
}

/** `name#/a/b` → [name, ['a', 'b']]. */
function splitKey(key) {
  const [name, pointer = ''] = key.split('#');
  const parts = pointer
    .split('/')
    .filter(part => part !== '')
    .map(part => part.replace(/~1/g, '/').replace(/~0/g, '~'));
  return [name, parts];
}

function pointerKey(name, parts) {
  return parts.length === 0
    ? name
    : `${name}#/${parts.map(p => p.replace(/~/g, '~0').replace(/\//g, '~1')).join('/')}`;
}

function lookup(schemas, key) {
  const [name, parts] = splitKey(key);
  let node = schemas.get(name);
  if (node === undefined) {
    throw new Error(`no schema file ${name}${SCHEMA_SUFFIX} (${key})`);
  }
  for (const part of parts) {
    node = node?.[part];
    if (node === undefined) {
      throw new Error(`${key}: no such place in ${name}${SCHEMA_SUFFIX}`);
    }
  }
  return node;
}

/** The key of what `$ref` in schema file `name` points at ("sample.schema.json", "#/$defs/device", …). */
function refKey(name, ref) {
  const [file, fragment] = ref.split('#');
  const target = file === '' ? name : file.replace(/\.schema\.json$/, '');
  if (file !== '' && !file.endsWith(SCHEMA_SUFFIX)) {
    throw new Error(`${name}: $ref ${ref} is not a schema file beside it`);
  }
  return fragment ? `${target}#${fragment}` : target;
}

function pascal(text) {
  return text
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map(word => word[0].toUpperCase() + word.slice(1))
    .join('');
}

/** Every subschema with `properties` (an object shape) and every definition, by key, in document order. */
function objectShapes(schemas) {
  const shapes = [];
  const visit = (node, name, parts) => {
    if (Array.isArray(node)) {
      node.forEach((item, i) => visit(item, name, [...parts, String(i)]));
    } else if (node !== null && typeof node === 'object') {
      const isShape =
        node.properties !== undefined && typeof node.properties === 'object' && parts.at(-1) !== 'properties';
      if (isShape || parts.at(-2) === '$defs') {
        shapes.push(pointerKey(name, parts));
      }
      for (const [key, child] of Object.entries(node)) {
        if (!['enum', 'const', 'required', 'type', 'examples', 'default'].includes(key)) {
          visit(child, name, [...parts, key]);
        }
      }
    }
  };
  for (const [name, schema] of schemas) {
    visit(schema, name, []);
  }
  return shapes;
}

/** The TypeScript name of every object shape (TYPE_NAMES, else a name made from its place). */
function typeNames(schemas) {
  for (const key of Object.keys(TYPE_NAMES)) {
    lookup(schemas, key); // a renamed schema or definition must not lose its name silently
  }
  const names = new Map();
  const taken = new Map();
  for (const key of objectShapes(schemas)) {
    const [name, parts] = splitKey(key);
    if (parts[0] === 'allOf' || parts.includes('if') || parts.includes('then') || parts.includes('else')) {
      continue; // conditions of if/then: no shape of their own
    }
    const words = parts.filter(
      p => !['properties', '$defs', 'items', 'anyOf', 'oneOf'].includes(p) && !/^\d+$/.test(p)
    );
    const typeName = TYPE_NAMES[key] ?? `I${pascal(name)}${words.map(pascal).join('')}`;
    if (taken.has(typeName)) {
      throw new Error(`two shapes would be called ${typeName}: ${taken.get(typeName)} and ${key}`);
    }
    taken.set(typeName, key);
    names.set(key, typeName);
  }
  for (const key of Object.keys(TYPE_NAMES)) {
    if (!names.has(key)) {
      throw new Error(`${key} is named in TYPE_NAMES but is no object shape`);
    }
  }
  return names;
}

// ---------------------------------------------------------------------------------------------------------
// types.ts (json-schema-to-typescript)

/**
 * All schemas as one document for json-schema-to-typescript: each file under `$defs/<name>`, references
 * rewritten to point there, every object shape titled with its TypeScript name, and `if`/`then` dropped
 * (they narrow values, not shapes: IRequestResults in protocol.ts maps actions to results).
 */
function typesDocument(schemas, names) {
  const rewrite = (node, name, parts) => {
    if (Array.isArray(node)) {
      return node.map((item, i) => rewrite(item, name, [...parts, String(i)]));
    }
    if (node === null || typeof node !== 'object') {
      return node;
    }
    const copy = {};
    for (const [key, value] of Object.entries(node)) {
      if (key === '$schema' || key === '$id' || key === 'if' || key === 'then' || key === 'else') {
        continue;
      }
      if (
        key === 'allOf' &&
        value.every(item => Object.keys(item).every(k => ['if', 'then', 'else'].includes(k)))
      ) {
        continue;
      }
      if (key === '$ref') {
        const [target, targetParts] = splitKey(refKey(name, value));
        copy.$ref = `#/$defs/${[target, ...targetParts].join('/')}`;
      } else if (key === 'properties' || key === '$defs') {
        copy[key] = Object.fromEntries(
          Object.entries(value).map(([k, v]) => [k, rewrite(v, name, [...parts, key, k])])
        );
      } else if (['enum', 'const', 'required', 'type'].includes(key)) {
        copy[key] = value;
      } else {
        copy[key] = rewrite(value, name, [...parts, key]);
      }
    }
    const typeName = names.get(pointerKey(name, parts));
    delete copy.title;
    if (typeName === undefined) {
      return copy;
    }
    if (Array.isArray(copy.type) && copy.type.length === 2 && copy.type.includes('null')) {
      // `type: ["object", "null"]`: the name is the object's, the field's type is `IName | null`
      return {
        anyOf: [{ type: 'null' }, { ...copy, type: copy.type.find(t => t !== 'null'), title: typeName }]
      };
    }
    return { ...copy, title: typeName };
  };
  const $defs = {};
  for (const [name, schema] of schemas) {
    $defs[name] = rewrite(schema, name, []);
  }
  return { title: 'IWireSchemas', type: 'object', properties: {}, additionalProperties: false, $defs };
}

async function typesFile(schemas) {
  const names = typeNames(schemas);
  let text = await compile(typesDocument(schemas, names), 'IWireSchemas', {
    bannerComment: '',
    format: false,
    unreachableDefinitions: true,
    ignoreMinAndMaxItems: true,
    strictIndexSignatures: false,
    unknownAny: true
  });
  // json-schema-to-typescript notes where each definition came from: in our one document, always the wrapper.
  text = text.replace(
    /\n \* ?\n \* This interface was referenced by `[^`]+`'s JSON-Schema\n \* via the `definition` "[^"]+"\./g,
    ''
  );
  text = text.replace(
    /\/\*\*\n \* This interface was referenced by `[^`]+`'s JSON-Schema\n \* via the `definition` "[^"]+"\.\n \*\/\n/g,
    ''
  );
  text = text.replace(/export interface IWireSchemas \{\s*\}\n/, '');
  if (/referenced by|IWireSchemas/.test(text)) {
    throw new Error('types.ts: json-schema-to-typescript wrote something this generator does not expect');
  }
  const intro = `${HEADER}
/**
 * The TypeScript types of every gpumem message and payload, one interface per object shape of the schemas.
 * src/wire/protocol.ts and src/wire/analysispayload.ts export them under the names the rest of src/ uses.
 */

`;
  return intro + text;
}

// ---------------------------------------------------------------------------------------------------------
// validators.ts (calls of the keyword functions in src/wire/keywords.ts)

const NUMERIC = new Set(['minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum']);
const STRING_LENGTH = new Set(['minLength', 'maxLength']);
const KNOWN = new Set([
  ...ANNOTATIONS,
  ...NUMERIC,
  ...STRING_LENGTH,
  '$ref',
  'type',
  'const',
  'enum',
  'pattern',
  'items',
  'minItems',
  'maxItems',
  'uniqueItems',
  'properties',
  'required',
  'additionalProperties',
  'propertyNames',
  'allOf',
  'anyOf',
  'oneOf',
  'if',
  'then',
  'else'
]);

const lit = value => JSON.stringify(value);

function camel(typeName) {
  const bare = typeName.replace(/^I(?=[A-Z])/, '');
  return bare[0].toLowerCase() + bare.slice(1);
}

class ValidatorWriter {
  constructor(schemas, names) {
    this.schemas = schemas;
    this.names = names;
    this.counts = new Map(); // fully inlined expression → uses (first pass)
    this.hoist = false;
    this.reset();
  }

  reset() {
    this.declarations = [];
    this.declared = new Map(); // key of a $ref target → its const name
    this.inProgress = new Set();
    this.hoisted = new Map(); // fully inlined expression → const name
    this.imports = new Set();
  }

  use(fn) {
    this.imports.add(fn);
    return fn;
  }

  /** The const name of a referenced schema, declaring it (after what it uses) the first time. */
  named(key, preferred = null) {
    if (this.declared.has(key)) {
      return this.declared.get(key);
    }
    if (this.inProgress.has(key)) {
      throw new Error(`${key}: recursive references are not supported`);
    }
    this.inProgress.add(key);
    const [name, parts] = splitKey(key);
    const typeName = this.names.get(key);
    const constName =
      preferred ?? (typeName ? camel(typeName) : `${camel(pascal(name))}${pascal(parts.join(' '))}`);
    const [, emitted] = this.node(lookup(this.schemas, key), name, parts, true);
    this.inProgress.delete(key);
    if ([...this.declared.values()].includes(constName)) {
      throw new Error(`two checks would be called ${constName}`);
    }
    this.declared.set(key, constName);
    this.declarations.push({ name: constName, body: emitted, key });
    return constName;
  }

  /** [fully inlined expression, emitted expression] of one subschema. */
  node(schema, name, parts, isNamed = false) {
    const [full, emitted] = this.expression(schema, name, parts);
    if (isNamed) {
      return [full, emitted];
    }
    if (!this.hoist) {
      this.counts.set(full, (this.counts.get(full) ?? 0) + 1);
      return [full, emitted];
    }
    if ((this.counts.get(full) ?? 0) > 1 && full.length >= 16 && !/^[A-Za-z0-9_]+$/.test(full)) {
      if (!this.hoisted.has(full)) {
        const constName = `c${this.hoisted.size + 1}`;
        this.hoisted.set(full, constName);
        this.declarations.push({ name: constName, body: emitted });
      }
      return [full, this.hoisted.get(full)];
    }
    return [full, emitted];
  }

  child(schema, name, parts) {
    return this.node(schema, name, parts);
  }

  /** `fn(args…)`, where args are [full, emitted] pairs or literals. */
  call(fn, args) {
    this.use(fn);
    const full = `${fn}(${args.map(a => (Array.isArray(a) ? a[0] : a)).join(', ')})`;
    const emitted = `${fn}(${args.map(a => (Array.isArray(a) ? a[1] : a)).join(', ')})`;
    return [full, emitted];
  }

  /** Does this subschema certainly reject null (so that `oneOf: [{type: null}, it]` is `nullable(it)`)? */
  rejectsNull(schema, name) {
    if (schema.$ref !== undefined) {
      const key = refKey(name, schema.$ref);
      return this.rejectsNull(lookup(this.schemas, key), splitKey(key)[0]);
    }
    const types = schema.type === undefined ? null : [].concat(schema.type);
    return types !== null && !types.includes('null');
  }

  expression(schema, name, parts) {
    const where = pointerKey(name, parts);
    if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) {
      throw new Error(`${where}: a boolean or non-object schema is not supported`);
    }
    const unknown = Object.keys(schema).filter(k => !KNOWN.has(k));
    if (unknown.length > 0) {
      throw new Error(`${where}: keyword ${unknown.join(', ')} is not supported by scripts/gen_wire.mjs`);
    }
    const at = (...more) => [...parts, ...more];
    const checks = [];
    const types = schema.type === undefined ? null : [].concat(schema.type);

    // type: [T, "null"] is null or T, when no keyword of the subschema could reject null by itself.
    const nullRejecting = ['$ref', 'const', 'enum', 'allOf', 'anyOf', 'oneOf', 'if'];
    if (
      types !== null &&
      types.length === 2 &&
      types.includes('null') &&
      !nullRejecting.some(k => k in schema)
    ) {
      const rest = { ...schema, type: types.find(t => t !== 'null') };
      return this.call('nullable', [this.expression(rest, name, parts)]);
    }
    // oneOf/anyOf of {type: null} and a schema that rejects null: the same.
    for (const keyword of ['oneOf', 'anyOf']) {
      const branches = schema[keyword];
      if (
        branches?.length === 2 &&
        Object.keys(schema).filter(k => !ANNOTATIONS.has(k)).length === 1 &&
        branches.some(b => Object.keys(b).length === 1 && b.type === 'null')
      ) {
        const i = branches.findIndex(b => !(Object.keys(b).length === 1 && b.type === 'null'));
        if (this.rejectsNull(branches[i], name)) {
          return this.call('nullable', [this.child(branches[i], name, at(keyword, String(i)))]);
        }
      }
    }

    if (schema.$ref !== undefined) {
      const ref = this.named(refKey(name, schema.$ref));
      checks.push([ref, ref]);
    }

    const numeric = Object.keys(schema).filter(k => NUMERIC.has(k));
    const lengths = Object.keys(schema).filter(k => STRING_LENGTH.has(k));
    if (types !== null) {
      const single = types.length === 1 ? types[0] : null;
      if ((single === 'integer' || single === 'number') && numeric.length > 0) {
        if ('minimum' in schema && 'exclusiveMinimum' in schema) {
          throw new Error(`${where}: minimum and exclusiveMinimum together are not supported`);
        }
        if ('maximum' in schema && 'exclusiveMaximum' in schema) {
          throw new Error(`${where}: maximum and exclusiveMaximum together are not supported`);
        }
        const min = schema.minimum ?? schema.exclusiveMinimum;
        const max = schema.maximum ?? schema.exclusiveMaximum;
        const exclusive =
          'exclusiveMinimum' in schema && 'exclusiveMaximum' in schema
            ? 'both'
            : 'exclusiveMinimum' in schema
              ? 'min'
              : 'exclusiveMaximum' in schema
                ? 'max'
                : undefined;
        const args = [min === undefined ? 'undefined' : lit(min)];
        if (max !== undefined || exclusive !== undefined) {
          args.push(max === undefined ? 'undefined' : lit(max));
        }
        if (exclusive !== undefined) {
          args.push(lit(exclusive));
        }
        checks.push(this.call(single, args));
      } else if (single === 'integer' || single === 'number') {
        checks.push(this.call(single, []));
      } else if (single === 'string') {
        const args = [];
        if (lengths.length > 0) {
          args.push(schema.minLength === undefined ? 'undefined' : lit(schema.minLength));
          if (schema.maxLength !== undefined) {
            args.push(lit(schema.maxLength));
          }
        }
        checks.push(this.call('string', args));
      } else if (single === 'object' && schema.properties !== undefined) {
        // type "object" with properties and required: one `object(...)` call below.
      } else if (single === 'array' && schema.items !== undefined) {
        // type "array" with items: one `array(...)` call below.
      } else {
        checks.push(this.call('type', types.map(lit)));
      }
    }
    if (numeric.length > 0 && !(types?.length === 1 && ['integer', 'number'].includes(types[0]))) {
      throw new Error(`${where}: ${numeric.join(', ')} without one numeric type is not supported`);
    }
    if (lengths.length > 0 && !(types?.length === 1 && types[0] === 'string')) {
      throw new Error(`${where}: ${lengths.join(', ')} without type "string" is not supported`);
    }

    if ('const' in schema) {
      checks.push(this.call('constant', [lit(schema.const)]));
    }
    if (schema.enum !== undefined) {
      checks.push(this.call('enumOf', schema.enum.map(lit)));
    }
    if (schema.pattern !== undefined) {
      checks.push(this.call('pattern', [`new RegExp(${lit(schema.pattern)}, 'u')`]));
    }

    if (schema.items !== undefined && types?.length === 1 && types[0] === 'array') {
      checks.push(this.call('array', [this.child(schema.items, name, at('items'))]));
    } else if (schema.items !== undefined) {
      checks.push(this.call('items', [this.child(schema.items, name, at('items'))]));
    }
    if (schema.minItems !== undefined) {
      checks.push(this.call('minItems', [lit(schema.minItems)]));
    }
    if (schema.maxItems !== undefined) {
      checks.push(this.call('maxItems', [lit(schema.maxItems)]));
    }
    if (schema.uniqueItems === true) {
      this.use('uniqueItems');
      checks.push(['uniqueItems', 'uniqueItems']);
    }

    if (schema.properties !== undefined || schema.required !== undefined) {
      // A property the schema does not require is marked optional(...); `required` names that are no
      // property (rare) are passed as the full list instead.
      // (`properties` without type "object", as in the conditions of if/then, always gets the list.)
      const required = schema.required ?? [];
      const names = Object.keys(schema.properties ?? {});
      const fn = types?.length === 1 && types[0] === 'object' ? 'object' : 'properties';
      const listed = fn === 'object' && required.every(key => names.includes(key));
      const fields = Object.entries(schema.properties ?? {}).map(([key, sub]) => {
        const pair = this.child(sub, name, at('properties', key));
        return [key, listed && !required.includes(key) ? this.call('optional', [pair]) : pair];
      });
      const map = which => `{${fields.map(([key, pair]) => `${lit(key)}: ${pair[which]}`).join(', ')}}`;
      const args = [[map(0), map(1)]];
      if (!listed) {
        args.push(lit(required));
      }
      checks.push(this.call(fn, args));
    }
    if (schema.additionalProperties !== undefined && schema.additionalProperties !== false) {
      if (schema.additionalProperties === true) {
        // allows anything: nothing to check
      } else {
        const known = Object.keys(schema.properties ?? {});
        const args = [this.child(schema.additionalProperties, name, at('additionalProperties'))];
        if (known.length > 0) {
          args.push(lit(known));
        }
        checks.push(this.call('additionalProperties', args));
      }
    }
    if (schema.propertyNames !== undefined) {
      checks.push(this.call('propertyNames', [this.child(schema.propertyNames, name, at('propertyNames'))]));
    }

    for (const [i, sub] of (schema.allOf ?? []).entries()) {
      checks.push(this.child(sub, name, at('allOf', String(i))));
    }
    for (const keyword of ['anyOf', 'oneOf']) {
      if (schema[keyword] !== undefined) {
        checks.push(
          this.call(
            keyword,
            schema[keyword].map((sub, i) => this.child(sub, name, at(keyword, String(i))))
          )
        );
      }
    }
    if (schema.if !== undefined) {
      const args = [this.child(schema.if, name, at('if'))];
      args.push(schema.then === undefined ? 'null' : this.child(schema.then, name, at('then')));
      if (schema.else !== undefined) {
        args.push(this.child(schema.else, name, at('else')));
      }
      checks.push(this.call('when', args));
    } else if (schema.then !== undefined || schema.else !== undefined) {
      // without `if`, `then` and `else` are ignored (JSON Schema 2020-12)
    }

    if (checks.length === 0) {
      this.use('anything');
      return ['anything', 'anything'];
    }
    return checks.length === 1 ? checks[0] : this.call('all', checks);
  }

  write() {
    for (const hoist of [false, true]) {
      this.hoist = hoist;
      this.reset();
      for (const [exported, key] of Object.entries(BROWSER_READS)) {
        this.named(key, exported);
      }
    }
    const exported = new Set(Object.keys(BROWSER_READS));
    const lines = this.declarations.map(({ name, body, key }) => {
      const comment = key === undefined ? '' : `/** ${key.replace(/^([^#]+)/, `$1${SCHEMA_SUFFIX}`)} */\n`;
      return `${comment}${exported.has(name) ? 'export ' : ''}const ${name}: Check = ${body};`;
    });
    const imports = [...this.imports].sort();
    return `${HEADER}
/**
 * One check per schema the browser reads: \`check(value, 'sample')\` is null when the value fits, else one
 * line naming the first field that does not. Made of the keyword functions in ../keywords.ts; fields the
 * schema does not name are ignored (README.md beside the schemas, "Extra fields").
 */
import { type Check, ${imports.join(', ')} } from '../keywords';

${lines.join('\n\n')}
`;
  }
}

// ---------------------------------------------------------------------------------------------------------

async function format(text, file) {
  const options = (await prettier.resolveConfig(file)) ?? {};
  return prettier.format(text, { ...options, filepath: file });
}

async function main() {
  const check = process.argv.includes('--check');
  const schemas = loadSchemas();
  const names = typeNames(schemas);
  const outputs = {
    'types.ts': await typesFile(schemas),
    'validators.ts': new ValidatorWriter(schemas, names).write()
  };
  let stale = 0;
  for (const [file, text] of Object.entries(outputs)) {
    const target = path.join(OUT_DIR, file);
    const formatted = await format(text, target);
    const current = fs.existsSync(target) ? fs.readFileSync(target, 'utf8') : null;
    const relative = path.relative(ROOT, target);
    if (current === formatted) {
      continue;
    }
    if (check) {
      console.error(`${relative} is out of date: run \`jlpm gen:wire\``);
      stale++;
    } else {
      fs.mkdirSync(OUT_DIR, { recursive: true });
      fs.writeFileSync(target, formatted);
      console.log(`wrote ${relative}`);
    }
  }
  if (check && stale === 0) {
    console.log('src/wire/generated/ is up to date with gpumem_kernel/wire/schemas/');
  }
  process.exitCode = stale > 0 ? 1 : 0;
}

main().catch(error => {
  console.error(`gen_wire: ${error.message}`);
  process.exitCode = 2;
});
