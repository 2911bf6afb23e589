/**
 * The JSON Schema keywords that the generated validators (./generated/validators.ts) are made of.
 *
 * `jlpm gen:wire` (scripts/gen_wire.mjs) turns every subschema of gpumem_kernel/wire/schemas/*.schema.json that
 * the browser reads into calls of these functions, ahead of time: nothing is compiled in the browser (no
 * schema library, no `new Function`). Each function checks what its JSON Schema 2020-12 keyword checks, on the
 * instance types the keyword applies to (`properties` passes a string by; `type` is what rejects it); a
 * subschema is all of its keywords, in order. jest checks the generated validators against Ajv on the schemas
 * themselves (src/wire/__tests__/).
 *
 * A check returns `null` when the value fits, else one line naming the path of the first field that does not
 * ("sample.gpu.devices[0].total: expected a non-negative integer, got the string "16 GiB""): what the UI shows
 * when a kernel message or a saved output does not fit this version of the extension.
 *
 * `additionalProperties: false` has no function here: the browser ignores fields it does not know
 * (gpumem_kernel/wire/schemas/README.md, "Extra fields").
 */

/** A check of one value at `path`: `null` when it fits, otherwise the problem. */
export type Check = (value: unknown, path: string) => string | null;

/** The JSON types of the `type` keyword. */
export type JsonType = 'null' | 'boolean' | 'integer' | 'number' | 'string' | 'array' | 'object';

/** True for a plain JSON object (not null, not an array). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A short description of a value for problem lines (never the whole value: it may be large). */
export function describeValue(value: unknown): string {
  if (value === null) {
    return 'null';
  }
  if (value === undefined) {
    return 'nothing';
  }
  if (Array.isArray(value)) {
    return 'an array';
  }
  switch (typeof value) {
    case 'string': {
      const shown = value.length > 40 ? `${value.slice(0, 40)}…` : value;
      return `the string ${JSON.stringify(shown)}`;
    }
    case 'number':
      return `the number ${value}`;
    case 'boolean':
      return `${value}`;
    case 'object':
      return 'an object';
    default:
      return typeof value;
  }
}

function expected(path: string, what: string, value: unknown): string {
  return `${path}: expected ${what}, got ${describeValue(value)}`;
}

const NOUNS: Readonly<Record<JsonType, string>> = {
  null: 'null',
  boolean: 'true or false',
  integer: 'an integer',
  number: 'a number',
  string: 'a string',
  array: 'an array',
  object: 'an object'
};

function hasType(value: unknown, type: JsonType): boolean {
  switch (type) {
    case 'null':
      return value === null;
    case 'boolean':
      return typeof value === 'boolean';
    case 'integer':
      // JSON has one number type: 1.0 is an integer (Python's json may write ints that way).
      return Number.isInteger(value);
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'string':
      return typeof value === 'string';
    case 'array':
      return Array.isArray(value);
    case 'object':
      return isRecord(value);
  }
}

/** JSON equality (`const`, `enum`, `uniqueItems`): same type and same value, objects key by key. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) {
    return true;
  }
  if (Array.isArray(a)) {
    return Array.isArray(b) && a.length === b.length && a.every((item, i) => jsonEqual(item, b[i]));
  }
  if (isRecord(a) && isRecord(b)) {
    const keys = Object.keys(a);
    return (
      keys.length === Object.keys(b).length &&
      keys.every(key => Object.prototype.hasOwnProperty.call(b, key) && jsonEqual(a[key], b[key]))
    );
  }
  return false;
}

/** Any value (a subschema without assertions). */
export const anything: Check = () => null;

/** `type`: a value of one of the given JSON types. */
export function type(...types: ReadonlyArray<JsonType>): Check {
  const what = types.map(t => NOUNS[t]).join(' or ');
  return (value, path) => (types.some(t => hasType(value, t)) ? null : expected(path, what, value));
}

/** `type: [T, "null"]` (and `oneOf`/`anyOf` of `{"type": "null"}` and a schema that rejects null): null or `check`. */
export function nullable(check: Check): Check {
  return (value, path) => (value === null ? null : check(value, path));
}

/** Which bounds of a range are exclusive (`exclusiveMinimum` / `exclusiveMaximum`). */
export type Exclusive = 'min' | 'max' | 'both' | undefined;

function describeRange(noun: string, min?: number, max?: number, exclusive?: Exclusive): string {
  const minOut = exclusive === 'min' || exclusive === 'both';
  const maxOut = exclusive === 'max' || exclusive === 'both';
  if (min !== undefined && max !== undefined) {
    if (minOut) {
      return `${noun} above ${min} and ${maxOut ? 'below' : 'at most'} ${max}`;
    }
    return maxOut ? `${noun} from ${min} up to (not including) ${max}` : `${noun} from ${min} to ${max}`;
  }
  if (min !== undefined) {
    if (noun === NOUNS.integer && min === 0 && !minOut) {
      return 'a non-negative integer';
    }
    return minOut ? `${noun} above ${min}` : `${noun} of at least ${min}`;
  }
  if (max !== undefined) {
    return maxOut ? `${noun} below ${max}` : `${noun} of at most ${max}`;
  }
  return noun;
}

function numeric(integer: boolean, min?: number, max?: number, exclusive?: Exclusive): Check {
  const what = describeRange(integer ? NOUNS.integer : NOUNS.number, min, max, exclusive);
  const minOut = exclusive === 'min' || exclusive === 'both';
  const maxOut = exclusive === 'max' || exclusive === 'both';
  return (value, path) =>
    hasType(value, integer ? 'integer' : 'number') &&
    (min === undefined || (minOut ? (value as number) > min : (value as number) >= min)) &&
    (max === undefined || (maxOut ? (value as number) < max : (value as number) <= max))
      ? null
      : expected(path, what, value);
}

/** `type: "integer"` with `minimum`/`maximum` (or their exclusive forms), as one check with one message. */
export function integer(min?: number, max?: number, exclusive?: Exclusive): Check {
  return numeric(true, min, max, exclusive);
}

/** `type: "number"` with `minimum`/`maximum` (or their exclusive forms), as one check with one message. */
export function number(min?: number, max?: number, exclusive?: Exclusive): Check {
  return numeric(false, min, max, exclusive);
}

/** Characters as JSON Schema counts them: code points, not UTF-16 units. */
function codePoints(text: string): number {
  let count = 0;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff && i + 1 < text.length) {
      const next = text.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        i++;
      }
    }
    count++;
  }
  return count;
}

/** `type: "string"` with `minLength`/`maxLength`, as one check with one message. */
export function string(minLength?: number, maxLength?: number): Check {
  const plural = (n: number): string => `${n} character${n === 1 ? '' : 's'}`;
  const what =
    minLength !== undefined && maxLength !== undefined
      ? `a string of ${minLength} to ${maxLength} characters`
      : minLength !== undefined
        ? `a string of at least ${plural(minLength)}`
        : maxLength !== undefined
          ? `a string of at most ${plural(maxLength)}`
          : NOUNS.string;
  return (value, path) => {
    if (typeof value !== 'string') {
      return expected(path, what, value);
    }
    if (minLength === undefined && maxLength === undefined) {
      return null;
    }
    const length = codePoints(value);
    return (minLength === undefined || length >= minLength) &&
      (maxLength === undefined || length <= maxLength)
      ? null
      : expected(path, what, value);
  };
}

/** `pattern` (strings only). */
export function pattern(regex: RegExp): Check {
  return (value, path) =>
    typeof value !== 'string' || regex.test(value)
      ? null
      : expected(path, `a string matching ${regex.source}`, value);
}

/** `const`. */
export function constant(allowed: unknown): Check {
  const what = JSON.stringify(allowed);
  return (value, path) => (jsonEqual(value, allowed) ? null : expected(path, what, value));
}

/** `enum`. */
export function enumOf(...allowed: ReadonlyArray<unknown>): Check {
  const what = allowed.map(v => JSON.stringify(v)).join(' or ');
  return (value, path) => (allowed.some(v => jsonEqual(value, v)) ? null : expected(path, what, value));
}

/** `items` (arrays only): every item passes `check`. */
export function items(check: Check): Check {
  return (value, path) => {
    if (!Array.isArray(value)) {
      return null;
    }
    for (let i = 0; i < value.length; i++) {
      const problem = check(value[i], `${path}[${i}]`);
      if (problem !== null) {
        return problem;
      }
    }
    return null;
  };
}

/** `type: "array"` with `items`. */
export function array(check: Check): Check {
  const isArray = type('array');
  const each = items(check);
  return (value, path) => isArray(value, path) ?? each(value, path);
}

/** `minItems` (arrays only). */
export function minItems(min: number): Check {
  return (value, path) =>
    !Array.isArray(value) || value.length >= min
      ? null
      : `${path}: expected at least ${min} item${min === 1 ? '' : 's'}, got ${value.length}`;
}

/** `maxItems` (arrays only). */
export function maxItems(max: number): Check {
  return (value, path) =>
    !Array.isArray(value) || value.length <= max
      ? null
      : `${path}: expected at most ${max} item${max === 1 ? '' : 's'}, got ${value.length}`;
}

/** `uniqueItems: true` (arrays only). */
export const uniqueItems: Check = (value, path) => {
  if (Array.isArray(value)) {
    for (let j = 1; j < value.length; j++) {
      for (let i = 0; i < j; i++) {
        if (jsonEqual(value[i], value[j])) {
          return `${path}: expected unique items, [${j}] repeats [${i}]`;
        }
      }
    }
  }
  return null;
};

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** The path of an object's field: `sample.gpu`, or `clear.reclaimed["cuda:0"]` for a key that is no identifier. */
function fieldPath(path: string, key: string): string {
  return IDENTIFIER.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

function has(value: object, key: string): boolean {
  return Object.prototype.hasOwnProperty.call(value, key);
}

/** A check marked as the check of a field that may be absent (a property not in `required`). */
export interface IOptionalCheck extends Check {
  readonly optional: true;
}

/** The check of a field the schema does not require: `properties` lets it be absent. */
export function optional(check: Check): IOptionalCheck {
  return Object.assign((value: unknown, path: string) => check(value, path), { optional: true as const });
}

function isOptional(check: Check): boolean {
  return (check as Partial<IOptionalCheck>).optional === true;
}

/**
 * `required` and `properties` (objects only): every required field is present (a value that could not be
 * measured is sent as null, never omitted), and every present field passes its check. Fields are checked in
 * the schema's order, so the problem named is the first field that does not fit. By default the required
 * fields are the listed ones not marked `optional(…)`.
 */
export function properties(
  fields: Readonly<Record<string, Check>>,
  required: ReadonlyArray<string> = Object.keys(fields).filter(key => !isOptional(fields[key]))
): Check {
  const entries = Object.entries(fields);
  const requiredOnly = required.filter(key => !has(fields, key));
  return (value, path) => {
    if (!isRecord(value)) {
      return null;
    }
    for (const [key, check] of entries) {
      if (has(value, key)) {
        const problem = check(value[key], fieldPath(path, key));
        if (problem !== null) {
          return problem;
        }
      } else if (required.includes(key)) {
        return missing(path, key);
      }
    }
    const absent = requiredOnly.find(key => !has(value, key));
    return absent === undefined ? null : missing(path, absent);
  };
}

function missing(path: string, key: string): string {
  return `${fieldPath(path, key)}: missing (a value that cannot be measured is sent as null)`;
}

/** `type: "object"` with `properties` and `required` (by default the listed fields not marked optional). */
export function object(fields: Readonly<Record<string, Check>>, required?: ReadonlyArray<string>): Check {
  const isObject = type('object');
  const check = properties(fields, required);
  return (value, path) => isObject(value, path) ?? check(value, path);
}

/** `additionalProperties` with a schema (objects only): the fields not in `known` (a map's entries). */
export function additionalProperties(check: Check, known: ReadonlyArray<string> = []): Check {
  return (value, path) => {
    if (!isRecord(value)) {
      return null;
    }
    for (const key of Object.keys(value)) {
      if (!known.includes(key)) {
        const problem = check(value[key], `${path}[${JSON.stringify(key)}]`);
        if (problem !== null) {
          return problem;
        }
      }
    }
    return null;
  };
}

/** `propertyNames` (objects only): every key passes `check`. */
export function propertyNames(check: Check): Check {
  return (value, path) => {
    if (!isRecord(value)) {
      return null;
    }
    for (const key of Object.keys(value)) {
      const problem = check(key, `${path}: key ${JSON.stringify(key)}`);
      if (problem !== null) {
        return problem;
      }
    }
    return null;
  };
}

/** `allOf`, and the keywords of one subschema: every check, the first problem wins. */
export function all(...checks: ReadonlyArray<Check>): Check {
  return (value, path) => {
    for (const check of checks) {
      const problem = check(value, path);
      if (problem !== null) {
        return problem;
      }
    }
    return null;
  };
}

/** Of the alternatives' problems, the one that went deepest into the value (it says most about what is wrong). */
function deepest(problems: ReadonlyArray<string>): string {
  const depth = (problem: string): number => problem.indexOf(': ');
  return problems.reduce((best, problem) => (depth(problem) > depth(best) ? problem : best));
}

/** `anyOf`: at least one check passes. */
export function anyOf(...checks: ReadonlyArray<Check>): Check {
  return (value, path) => {
    const problems: string[] = [];
    for (const check of checks) {
      const problem = check(value, path);
      if (problem === null) {
        return null;
      }
      problems.push(problem);
    }
    return deepest(problems);
  };
}

/** `oneOf`: exactly one check passes. */
export function oneOf(...checks: ReadonlyArray<Check>): Check {
  return (value, path) => {
    const problems: string[] = [];
    for (const check of checks) {
      const problem = check(value, path);
      if (problem !== null) {
        problems.push(problem);
      }
    }
    if (problems.length === checks.length - 1) {
      return null;
    }
    return problems.length === checks.length
      ? deepest(problems)
      : `${path}: expected exactly one of ${checks.length} forms, ${checks.length - problems.length} fit`;
  };
}

/** `if` / `then` / `else`. */
export function when(condition: Check, then: Check | null, otherwise: Check | null = null): Check {
  return (value, path) => {
    const next = condition(value, path) === null ? then : otherwise;
    return next === null ? null : next(value, path);
  };
}
