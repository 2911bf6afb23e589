/**
 * Ajv on the JSON Schemas themselves (gpumem_kernel/wire/schemas/*.schema.json), for tests only: the yardstick
 * the generated validators are measured against. Nothing in src/ outside tests runs Ajv.
 *
 * - `kernelRule`: the schemas as written (`additionalProperties: false`): what the kernel must send, the rule
 *   the Python tests apply to every message and payload it emits.
 * - `browserRule`: the same schemas without `additionalProperties: false`: what the browser accepts (fields a
 *   schema does not name are ignored: README.md beside the schemas, "Extra fields").
 */
import Ajv2020 from 'ajv/dist/2020';
import * as fs from 'fs';
import * as path from 'path';

export const SCHEMA_DIR = path.join(__dirname, '..', '..', '..', 'gpumem_kernel', 'wire', 'schemas');

export const SCHEMA_FILES = fs.readdirSync(SCHEMA_DIR).filter(f => f.endsWith('.schema.json'));

function withoutClosedObjects(schema: unknown): unknown {
  if (Array.isArray(schema)) {
    return schema.map(withoutClosedObjects);
  }
  if (schema !== null && typeof schema === 'object') {
    return Object.fromEntries(
      Object.entries(schema)
        .filter(([key, value]) => !(key === 'additionalProperties' && value === false))
        .map(([key, value]) => [
          key,
          ['enum', 'const', 'required'].includes(key) ? value : withoutClosedObjects(value)
        ])
    );
  }
  return schema;
}

function ajvFor(transform: (schema: unknown) => unknown): Ajv2020 {
  const ajv = new Ajv2020({ strict: false });
  for (const file of SCHEMA_FILES) {
    // history and reply refer to "sample.schema.json" by file name: register each file under its name.
    ajv.addSchema(
      transform(JSON.parse(fs.readFileSync(path.join(SCHEMA_DIR, file), 'utf8'))) as object,
      file
    );
  }
  return ajv;
}

const kernel = ajvFor(schema => schema);
const browser = ajvFor(withoutClosedObjects);

function validator(ajv: Ajv2020) {
  return (ref: string, data: unknown): boolean => {
    const ok = ajv.validate(ref, data);
    if (!ok && process.env.GPUMEM_DEBUG) {
      console.log(ref, ajv.errorsText());
    }
    return ok;
  };
}

/** Valid under the schema `ref` ("sample.schema.json", "reply.schema.json#/$defs/child") as written. */
export const kernelRule = validator(kernel);

/** Valid under the schema `ref` with fields it does not name ignored. */
export const browserRule = validator(browser);

type Json = Record<string, unknown>;

/** A copy of `data` with the field at a dotted path ("gpu.devices.0.total") set to `value`, or deleted. */
export function mutate(data: unknown, at: string, value: unknown): Json {
  const copy = JSON.parse(JSON.stringify(data)) as Json;
  const keys = at.split('.');
  let target: Json = copy;
  for (const key of keys.slice(0, -1)) {
    target = target[key] as Json;
  }
  const last = keys[keys.length - 1];
  if (value === undefined) {
    delete target[last];
  } else {
    target[last] = value;
  }
  return copy;
}
