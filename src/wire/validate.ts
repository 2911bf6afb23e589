/**
 * Tiny runtime type checks for JSON received from the kernel.
 *
 * Everything on the comm is data typed by another program (possibly another version of it), so each field is
 * checked before the UI trusts it. A check returns `null` when the value fits, or one human-readable line
 * naming the path of the first field that does not ("sample.gpu.devices[0].total: expected ..."). We do not
 * pull in a JSON-Schema library: the wire format is small, and these messages are what a user (or the lead's
 * bug report) reads when the kernel and the extension disagree.
 */

/** A check of one value at `path`: `null` when it fits, otherwise the problem. */
export type Check = (value: unknown, path: string) => string | null;

/** A short description of a value for problem messages (never the whole value: it may be large). */
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

/** True for a plain JSON object (not null, not an array). */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function expected(what: string): Check {
  return (value, path) => `${path}: expected ${what}, got ${describeValue(value)}`;
}

/** Any string. */
export const str: Check = (value, path) =>
  typeof value === 'string' ? null : expected('a string')(value, path);

/** true or false. */
export const bool: Check = (value, path) =>
  typeof value === 'boolean' ? null : expected('true or false')(value, path);

/** A finite number. */
export const num: Check = (value, path) =>
  typeof value === 'number' && Number.isFinite(value) ? null : expected('a number')(value, path);

/** A whole number (JSON has no integer type; Python's `json` writes ints without a fraction). */
export const int: Check = (value, path) =>
  typeof value === 'number' && Number.isInteger(value) ? null : expected('an integer')(value, path);

/** A size: a non-negative whole number of bytes. */
export const bytes: Check = (value, path) =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0
    ? null
    : expected('a non-negative integer (bytes)')(value, path);

/** A non-negative whole number (counts, PIDs, sequence numbers). */
export const count: Check = (value, path) =>
  typeof value === 'number' && Number.isInteger(value) && value >= 0
    ? null
    : expected('a non-negative integer')(value, path);

/** A whole number within [min, max]. */
export function intIn(min: number, max: number): Check {
  return (value, path) =>
    typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max
      ? null
      : expected(`an integer from ${min} to ${max}`)(value, path);
}

/** A string matching `pattern` (described as `what` in problems). */
export function matching(pattern: RegExp, what: string): Check {
  return (value, path) =>
    typeof value === 'string' && pattern.test(value) ? null : expected(what)(value, path);
}

/** A number within [min, max]. */
export function numIn(min: number, max: number): Check {
  return (value, path) =>
    typeof value === 'number' && Number.isFinite(value) && value >= min && value <= max
      ? null
      : expected(`a number from ${min} to ${max}`)(value, path);
}

/** One of the given literal values. */
export function oneOf(...values: ReadonlyArray<string | number | boolean>): Check {
  const shown = values.map(v => JSON.stringify(v)).join(' or ');
  return (value, path) =>
    (values as ReadonlyArray<unknown>).includes(value) ? null : expected(shown)(value, path);
}

/** `check`, or null ("could not be measured"). The field must still be present. */
export function nullable(check: Check): Check {
  return (value, path) => (value === null ? null : check(value, path));
}

/** An array whose every item passes `check`. */
export function arrayOf(check: Check): Check {
  return (value, path) => {
    if (!Array.isArray(value)) {
      return expected('an array')(value, path);
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

/**
 * An object holding every listed field (present, even when null) with the listed check.
 *
 * Extra fields are accepted: the protocol allows additive changes without a version bump, so an older
 * extension must not reject a newer kernel's extra information.
 */
export function object(
  fields: Readonly<Record<string, Check>>,
  optionalFields: Readonly<Record<string, Check>> = {}
): Check {
  return (value, path) => {
    if (!isRecord(value)) {
      return expected('an object')(value, path);
    }
    for (const [key, check] of Object.entries(fields)) {
      if (!(key in value)) {
        return `${path}.${key}: missing (a value that cannot be measured is sent as null)`;
      }
      const problem = check(value[key], `${path}.${key}`);
      if (problem !== null) {
        return problem;
      }
    }
    // Fields added to the protocol later: older kernels omit them, but when present they must fit.
    for (const [key, check] of Object.entries(optionalFields)) {
      if (key in value) {
        const problem = check(value[key], `${path}.${key}`);
        if (problem !== null) {
          return problem;
        }
      }
    }
    return null;
  };
}

/** Exactly `value` (a JSON Schema `const`). */
export function constant(value: string | number | boolean): Check {
  return (actual, path) => (actual === value ? null : expected(JSON.stringify(value))(actual, path));
}

/** A string of at least `min` and at most `max` characters. */
export function strLength(min: number, max: number = Number.MAX_SAFE_INTEGER): Check {
  return (value, path) =>
    typeof value === 'string' && value.length >= min && value.length <= max
      ? null
      : expected(
          max === Number.MAX_SAFE_INTEGER
            ? `a string of at least ${min} character${min === 1 ? '' : 's'}`
            : `a string of ${min} to ${max} characters`
        )(value, path);
}

/** An array of at least `min` items, each passing `check`. */
export function arrayOfAtLeast(min: number, check: Check): Check {
  const items = arrayOf(check);
  return (value, path) => {
    const problem = items(value, path);
    if (problem !== null) {
      return problem;
    }
    return (value as unknown[]).length >= min
      ? null
      : `${path}: expected at least ${min} item${min === 1 ? '' : 's'}, got ${(value as unknown[]).length}`;
  };
}

/**
 * An object used as a map: every value passes `check`; with `keyPattern`, every key must match it
 * (JSON Schema `propertyNames`).
 */
export function recordOf(check: Check, keyPattern: RegExp | null = null, keyWhat = 'a valid key'): Check {
  return (value, path) => {
    if (!isRecord(value)) {
      return expected('an object')(value, path);
    }
    for (const [key, item] of Object.entries(value)) {
      if (keyPattern !== null && !keyPattern.test(key)) {
        return `${path}: key ${JSON.stringify(key)} is not ${keyWhat}`;
      }
      const problem = check(item, `${path}[${JSON.stringify(key)}]`);
      if (problem !== null) {
        return problem;
      }
    }
    return null;
  };
}

/** Every check, in order (the first problem wins). */
export function allOf(...checks: ReadonlyArray<Check>): Check {
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
