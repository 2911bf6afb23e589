/**
 * @jest-environment node
 *
 * The keyword functions the generated validators are made of: what each accepts, and the one line it says
 * when a value does not fit (what the UI shows). agreement.spec.ts checks them against Ajv on the schemas.
 */
import {
  additionalProperties,
  all,
  anyOf,
  array,
  constant,
  describeValue,
  enumOf,
  integer,
  jsonEqual,
  maxItems,
  minItems,
  nullable,
  number,
  object,
  oneOf,
  optional,
  pattern,
  properties,
  propertyNames,
  string,
  type,
  uniqueItems,
  when
} from '../keywords';

describe('types and ranges', () => {
  it.each<[string, ReturnType<typeof integer>, unknown, string | null]>([
    ['integer()', integer(), 3, null],
    ['integer() of 1.0 written by Python', integer(), JSON.parse('1.0'), null],
    ['integer()', integer(), 1.5, 'x: expected an integer, got the number 1.5'],
    ['integer(0)', integer(0), -1, 'x: expected a non-negative integer, got the number -1'],
    ['integer(1)', integer(1), 0, 'x: expected an integer of at least 1, got the number 0'],
    ['integer(0, 100)', integer(0, 100), 101, 'x: expected an integer from 0 to 100, got the number 101'],
    ['number(0.1, 60)', number(0.1, 60), '1', 'x: expected a number from 0.1 to 60, got the string "1"'],
    ['number(0)', number(0), -0.5, 'x: expected a number of at least 0, got the number -0.5'],
    [
      'number(0, 1, "max")',
      number(0, 1, 'max'),
      1,
      'x: expected a number from 0 up to (not including) 1, got the number 1'
    ],
    [
      'number(0, 1, "min")',
      number(0, 1, 'min'),
      0,
      'x: expected a number above 0 and at most 1, got the number 0'
    ],
    ['number(0, 1, "min") at 1', number(0, 1, 'min'), 1, null],
    [
      'number(undefined, 1, "max")',
      number(undefined, 1, 'max'),
      1,
      'x: expected a number below 1, got the number 1'
    ],
    ['number()', number(), Number.NaN, 'x: expected a number, got the number NaN'],
    ['nullable(integer(0))', nullable(integer(0)), null, null],
    [
      'nullable(integer(0))',
      nullable(integer(0)),
      'a',
      'x: expected a non-negative integer, got the string "a"'
    ],
    ['type("string", "null")', type('string', 'null'), 3, 'x: expected a string or null, got the number 3'],
    ['type("boolean")', type('boolean'), 'true', 'x: expected true or false, got the string "true"'],
    ['type("object")', type('object'), [], 'x: expected an object, got an array'],
    ['type("array")', type('array'), {}, 'x: expected an array, got an object'],
    ['type("null")', type('null'), undefined, 'x: expected null, got nothing']
  ])('%s: %p', (_, check, value, problem) => {
    expect(check(value, 'x')).toBe(problem);
  });
});

describe('strings', () => {
  it('counts characters as JSON Schema does: code points, not UTF-16 units', () => {
    const faces = '\u{1F600}'.repeat(3); // 6 UTF-16 units
    expect(string(0, 3)(faces, 'x')).toBeNull();
    expect(string(0, 2)(faces, 'x')).toBe(
      `x: expected a string of 0 to 2 characters, got the string "${faces}"`
    );
    expect(string(1)('', 'x')).toBe('x: expected a string of at least 1 character, got the string ""');
    expect(string(undefined, 2)('abc', 'x')).toBe(
      'x: expected a string of at most 2 characters, got the string "abc"'
    );
  });

  it('matches patterns with unicode semantics, and passes other types by', () => {
    const cc = pattern(new RegExp('^[0-9]+\\.[0-9]+$', 'u'));
    expect(cc('8.9', 'x')).toBeNull();
    expect(cc('8', 'x')).toBe('x: expected a string matching ^[0-9]+\\.[0-9]+$, got the string "8"');
    expect(cc(8, 'x')).toBeNull();
  });

  it('shows at most 40 characters of a value', () => {
    expect(describeValue('y'.repeat(100))).toBe(`the string "${'y'.repeat(40)}…"`);
  });
});

describe('const, enum and JSON equality', () => {
  it('compares JSON values', () => {
    expect(jsonEqual({ a: [1, { b: null }] }, { a: [1, { b: null }] })).toBe(true);
    expect(jsonEqual({ a: 1 }, { a: 1, b: 2 })).toBe(false);
    expect(jsonEqual([1], { 0: 1 })).toBe(false);
    expect(jsonEqual(1, 1.0)).toBe(true);
  });

  it('names the allowed values', () => {
    expect(constant(1)(2, 'x')).toBe('x: expected 1, got the number 2');
    expect(enumOf(null, 'fp16', 'bf16')(null, 'x')).toBeNull();
    expect(enumOf(null, 'fp16', 'bf16')('fp8', 'x')).toBe(
      'x: expected null or "fp16" or "bf16", got the string "fp8"'
    );
  });
});

describe('arrays', () => {
  it('checks each item, naming its index', () => {
    expect(array(integer(0))([0, 1, -2], 'x')).toBe(
      'x[2]: expected a non-negative integer, got the number -2'
    );
    expect(array(integer(0))('no', 'x')).toBe('x: expected an array, got the string "no"');
  });

  it('counts items, and finds repeats', () => {
    expect(minItems(1)([], 'x')).toBe('x: expected at least 1 item, got 0');
    expect(maxItems(2)([1, 2, 3], 'x')).toBe('x: expected at most 2 items, got 3');
    expect(uniqueItems(['a', 'b', 'a'], 'x')).toBe('x: expected unique items, [2] repeats [0]');
    expect(uniqueItems([{ a: 1 }, { a: 2 }], 'x')).toBeNull();
    expect(minItems(1)('not an array', 'x')).toBeNull();
  });
});

describe('objects', () => {
  const device = object({ name: nullable(string()), total: nullable(integer(0)), mig: type('boolean') });

  it('names the first field in the schema’s order that does not fit, missing or wrong', () => {
    expect(device({ name: 'a', total: -1 }, 'd')).toBe(
      'd.total: expected a non-negative integer, got the number -1'
    );
    expect(device({ name: 'a', total: 1 }, 'd')).toBe(
      'd.mig: missing (a value that cannot be measured is sent as null)'
    );
    expect(device({ name: null, total: null, mig: false }, 'd')).toBeNull();
    expect(device(null, 'd')).toBe('d: expected an object, got null');
  });

  it('ignores fields it does not name, and checks optional fields only when present', () => {
    const hello = object({ pid: integer(0), create_time: nullable(number()) }, ['pid']);
    expect(hello({ pid: 1, future: [1] }, 'h')).toBeNull();
    expect(hello({ pid: 1, create_time: 'x' }, 'h')).toBe(
      'h.create_time: expected a number, got the string "x"'
    );
    expect(properties({}, ['type'])({}, 'm')).toBe(
      'm.type: missing (a value that cannot be measured is sent as null)'
    );
    const marked = object({ pid: integer(0), create_time: optional(nullable(number())) });
    expect(marked({ pid: 1 }, 'h')).toBeNull();
    expect(marked({ create_time: 1 }, 'h')).toBe(
      'h.pid: missing (a value that cannot be measured is sent as null)'
    );
  });

  it('checks the entries of a map and its keys', () => {
    const reclaimed = all(
      type('object'),
      additionalProperties(nullable(integer())),
      propertyNames(pattern(new RegExp('^cuda:[0-9]+$', 'u')))
    );
    expect(reclaimed({ 'cuda:0': 5, 'cuda:1': null }, 'r')).toBeNull();
    expect(reclaimed({ 'cuda:0': 'x' }, 'r')).toBe('r["cuda:0"]: expected an integer, got the string "x"');
    expect(reclaimed({ gpu: 1 }, 'r')).toBe(
      'r: key "gpu": expected a string matching ^cuda:[0-9]+$, got the string "gpu"'
    );
    expect(additionalProperties(integer(), ['name'])({ name: 'n', a: 1 }, 'm')).toBeNull();
  });
});

describe('combinations', () => {
  it('anyOf / oneOf: the problem of the alternative that went deepest', () => {
    const holder = object({ name: string() });
    expect(oneOf(type('null'), holder)({ name: 3 }, 'h')).toBe('h.name: expected a string, got the number 3');
    expect(anyOf(type('null'), holder)(null, 'h')).toBeNull();
    expect(oneOf(number(), integer())(1, 'h')).toBe('h: expected exactly one of 2 forms, 2 fit');
    expect(oneOf(number(), integer())(1.5, 'h')).toBeNull();
  });

  it('if / then / else', () => {
    const step = when(
      object({ action: constant('shutdown-kernel') }, []),
      object({ kernel_id: string(1) }, []),
      null
    );
    expect(step({ action: 'shutdown-kernel', kernel_id: '' }, 's')).toBe(
      's.kernel_id: expected a string of at least 1 character, got the string ""'
    );
    expect(step({ action: 'clear', kernel_id: '' }, 's')).toBeNull();
    expect(when(type('string'), null, integer())(1.5, 's')).toBe(
      's: expected an integer, got the number 1.5'
    );
  });
});
