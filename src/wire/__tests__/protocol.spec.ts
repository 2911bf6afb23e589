import {
  isError,
  isHello,
  isHistory,
  isReply,
  isSample,
  makeOpen,
  parseKernelMessage,
  parseResult,
  PROTOCOL_VERSION,
  ProtocolProblem
} from '../protocol';
import * as fx from '../../__tests__/fixtures';

type Json = Record<string, unknown>;

/** Set (or with `undefined`, delete) the field at a dotted path like "gpu.devices.0.total". */
function mutate(message: unknown, path: string, value: unknown): Json {
  const copy = JSON.parse(JSON.stringify(message)) as Json;
  const keys = path.split('.');
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

function problemOf(data: unknown): ProtocolProblem {
  const parsed = parseKernelMessage(data);
  expect(parsed).toBeInstanceOf(ProtocolProblem);
  return parsed as ProtocolProblem;
}

describe('valid messages', () => {
  it.each([
    ['hello', fx.hello],
    ['sample', fx.sample()],
    ['sample without GPU', fx.noGpuSample()],
    [
      'sample with a MIG slice and an unreadable device',
      {
        ...fx.sample(),
        gpu: { ...fx.sample().gpu, devices: [fx.device0(), fx.migSlice(), fx.unreadableDevice()] }
      }
    ],
    ['snapshot sample (seq 0)', fx.sample(0)],
    ['hello without create_time (older kernel)', fx.helloWithoutCreateTime()],
    ['hello with nulls', { ...fx.hello, ipykernel: null, torch: null, create_time: null }],
    ['history', fx.history()],
    ['empty history', { type: 'history', samples: [] }],
    ['reply', fx.snapshotReply()],
    ['error with id', fx.errorReply('r-3')],
    ['error without id', fx.errorReply(null)]
  ])('%s passes', (_, message) => {
    const parsed = parseKernelMessage(fx.wire(message));
    expect(parsed).not.toBeInstanceOf(ProtocolProblem);
    expect(parsed).toEqual(message);
  });

  it('each guard accepts its own type only', () => {
    expect(isHello(fx.wire(fx.hello))).toBe(true);
    expect(isSample(fx.wire(fx.sample()))).toBe(true);
    expect(isHistory(fx.wire(fx.history()))).toBe(true);
    expect(isReply(fx.wire(fx.snapshotReply()))).toBe(true);
    expect(isError(fx.wire(fx.errorReply()))).toBe(true);
    expect(isHello(fx.wire(fx.sample()))).toBe(false);
    expect(isSample(fx.wire(fx.hello))).toBe(false);
    expect(isError(fx.wire(fx.snapshotReply()))).toBe(false);
  });

  it('accepts extra fields (additive changes keep the protocol version)', () => {
    const withExtra = mutate(fx.sample(), 'gpu.devices.0.temperature', 61);
    expect(isSample(withExtra)).toBe(true);
    expect(isHello({ ...fx.hello, new_field: [1, 2] })).toBe(true);
  });

  it('accepts ints written as floats by Python (1.0)', () => {
    // JSON.parse("1.0") === 1: whole numbers are integers whatever their spelling.
    expect(isSample(JSON.parse(JSON.stringify(fx.sample()).replace('"seq":42', '"seq":42.0')))).toBe(true);
  });
});

describe('rejected messages name the field', () => {
  it.each([
    ['seq', 'a string', 'sample.seq: expected a non-negative integer'],
    ['seq', 1.5, 'sample.seq: expected a non-negative integer'],
    ['seq', -1, 'sample.seq: expected a non-negative integer'],
    ['time', null, 'sample.time: expected a number, got null'],
    ['gpu.available', 'yes', 'sample.gpu.available: expected true or false'],
    ['gpu.reason', 3, 'sample.gpu.reason: expected a string'],
    ['gpu.device_order', 'RANDOM', 'sample.gpu.device_order: expected "FASTEST_FIRST" or "PCI_BUS_ID"'],
    ['gpu.devices', {}, 'sample.gpu.devices: expected an array'],
    [
      'gpu.devices.0.total',
      '16 GiB',
      'sample.gpu.devices[0].total: expected a non-negative integer, got the string "16 GiB"'
    ],
    [
      'gpu.devices.0.used',
      -1,
      'sample.gpu.devices[0].used: expected a non-negative integer, got the number -1'
    ],
    ['gpu.devices.0.util_gpu', 140, 'sample.gpu.devices[0].util_gpu: expected an integer from 0 to 100'],
    ['gpu.devices.0.util_mem', 37.5, 'sample.gpu.devices[0].util_mem: expected an integer from 0 to 100'],
    ['gpu.devices.0.cuda_index', '0', 'sample.gpu.devices[0].cuda_index: expected a non-negative integer'],
    [
      'gpu.devices.0.compute_capability',
      '8',
      'sample.gpu.devices[0].compute_capability: expected a string matching ^[0-9]+\\.[0-9]+$, got the string "8"'
    ],
    ['gpu.devices.0.name', 4080, 'sample.gpu.devices[0].name: expected a string'],
    ['gpu.devices.0.mig', null, 'sample.gpu.devices[0].mig: expected true or false, got null'],
    [
      'gpu.devices.0.allocator.reserved',
      null,
      'sample.gpu.devices[0].allocator.reserved: expected a non-negative integer'
    ],
    [
      'gpu.devices.0.processes.1.kernel_id',
      7,
      'sample.gpu.devices[0].processes[1].kernel_id: expected a string'
    ],
    [
      'gpu.devices.0.processes.0.this_kernel',
      'true',
      'sample.gpu.devices[0].processes[0].this_kernel: expected true or false'
    ],
    ['kernel.gpu_used', 1.5, 'sample.kernel.gpu_used: expected a non-negative integer'],
    ['kernel.torch.cuda_initialized', 0, 'sample.kernel.torch.cuda_initialized: expected true or false'],
    ['host.children.count', '2', 'sample.host.children.count: expected a non-negative integer'],
    ['host.container_limit', 'max', 'sample.host.container_limit: expected a non-negative integer'],
    ['errors', 'oops', 'sample.errors: expected an array'],
    ['errors.0', 12, null]
  ])('sample.%s = %p', (path, value, expected) => {
    const base = path === 'errors.0' ? mutate(fx.sample(), 'errors', ['x']) : fx.sample();
    const problem = problemOf(mutate(base, path, value));
    expect(problem.messageType).toBe('sample');
    expect(problem.kernelProtocol).toBeNull();
    expect(problem.message).toContain(expected ?? 'sample.errors[0]: expected a string');
  });

  it.each([
    'seq',
    'time',
    'gpu',
    'gpu.reason',
    'gpu.devices.0.this_kernel',
    'gpu.devices.0.allocator',
    'gpu.devices.0.processes.0.used',
    'kernel.torch',
    'host.container_usage',
    'errors'
  ])('missing sample.%s is rejected (null, not omitted, means "not measured")', path => {
    const problem = problemOf(mutate(fx.sample(), path, undefined));
    const shown = `sample.${path}`.replace(/\.(\d+)/g, '[$1]');
    expect(problem.message).toBe(`${shown}: missing (a value that cannot be measured is sent as null)`);
  });

  it.each([
    ['version', 1, 'hello.version: expected a string'],
    ['capabilities', 'sample', 'hello.capabilities: expected an array'],
    ['interval', '1', 'hello.interval: expected a number'],
    ['torch', false, 'hello.torch: expected a string'],
    ['history_seconds', 5, 'hello.history_seconds: expected an integer from 10 to 3600'],
    ['interval', 0, 'hello.interval: expected a number from 0.1 to 60'],
    ['create_time', 'yesterday', 'hello.create_time: expected a number'],
    ['pid', undefined, 'hello.pid: missing']
  ])('hello.%s = %p', (path, value, expected) => {
    expect(problemOf(mutate(fx.hello, path, value)).message).toContain(expected);
  });

  it('rejects a history holding a bad sample, naming it', () => {
    const bad = mutate(fx.history(), 'samples.1.gpu.devices.0.free', 'lots');
    expect(problemOf(bad).message).toContain('history.samples[1].gpu.devices[0].free');
  });

  it('rejects a history item that is not a sample', () => {
    const bad = mutate(fx.history(), 'samples.0.type', 'hello');
    expect(problemOf(bad).message).toContain('history.samples[0].type: expected "sample"');
  });

  it.each([
    [fx.snapshotReply(), 'id', 17, 'reply.id: expected a string'],
    [fx.snapshotReply(), 'result', [], 'reply.result: expected an object'],
    [
      fx.errorReply(),
      'code',
      'teapot',
      'error.code: expected "bad-request" or "unknown-action" or "internal"'
    ],
    [fx.errorReply(), 'id', undefined, 'error.id: missing'],
    [fx.errorReply(), 'message', null, 'error.message: expected a string']
  ])('reply/error field %#', (message, path, value, expected) => {
    expect(problemOf(mutate(message, path, value)).message).toContain(expected);
  });

  it.each([
    [null, 'message: expected a JSON object, got null'],
    [[1, 2], 'message: expected a JSON object, got an array'],
    ['sample', 'message: expected a JSON object, got the string "sample"'],
    [{ seq: 1 }, 'message.type: expected a string, got nothing']
  ])('rejects %p', (data, expected) => {
    expect(problemOf(data).message).toBe(expected);
  });

  it('marks unknown message types as such (a newer kernel may add some)', () => {
    const problem = problemOf({ type: 'telemetry', x: 1 });
    expect(problem.unknownType).toBe(true);
    expect(problem.message).toContain('unknown message type "telemetry"');
    expect(problemOf(mutate(fx.sample(), 'seq', 'x')).unknownType).toBe(false);
  });
});

describe('protocol version', () => {
  it('speaks v1', () => {
    expect(PROTOCOL_VERSION).toBe(1);
  });

  it.each([2, 0])('refuses a hello in protocol v%d with a fix', protocol => {
    // Other fields may differ in another protocol: the version is checked first.
    const problem = problemOf({ type: 'hello', protocol, whatever: true });
    expect(problem.kernelProtocol).toBe(protocol);
    expect(problem.message).toContain(`kernel speaks protocol v${protocol}, this extension speaks v1`);
    expect(problem.message).toContain('pip install -U jupyterlab-gpumem');
  });

  it('tells an old kernel to upgrade the kernel environment', () => {
    expect(problemOf({ type: 'hello', protocol: 0 }).message).toContain("in the kernel's environment");
  });

  it('treats a non-integer protocol as a type error, not a version', () => {
    const problem = problemOf(mutate(fx.hello, 'protocol', '1'));
    expect(problem.kernelProtocol).toBeNull();
    expect(problem.message).toContain('hello.protocol: expected an integer');
  });
});

describe('request results', () => {
  it('validates each action', () => {
    expect(parseResult('snapshot', fx.wire(fx.sample()))).toEqual(fx.sample());
    expect(parseResult('history', { samples: [] })).toEqual({ samples: [] });
    expect(parseResult('configure', { interval: 2, history_seconds: 60 })).toEqual({
      interval: 2,
      history_seconds: 60
    });
    expect(parseResult('children', fx.wire(fx.childrenResult()))).toEqual(fx.childrenResult());
    expect(parseResult('processes', fx.wire(fx.processesResult()))).toEqual(fx.processesResult());
    expect(parseResult('terminate', fx.wire(fx.terminateResult()))).toEqual(fx.terminateResult());
    const noChildren = parseResult('children', {
      children: [{ pid: 0, create_time: 1, name: null, rss: null, gpu_used: null }]
    });
    expect((noChildren as ProtocolProblem).message).toContain('reply(children).result.children[0].pid');
    const badState = parseResult('processes', {
      processes: [{ ...fx.processesResult().processes[0], alive: 'yes' }]
    });
    expect((badState as ProtocolProblem).message).toContain('reply(processes).result.processes[0].alive');
    const badRefusal = parseResult('terminate', { terminated: [], refused: [{ pid: 1 }] });
    expect((badRefusal as ProtocolProblem).message).toContain(
      'reply(terminate).result.refused[0].reason: missing'
    );
    const bad = parseResult('configure', { interval: 'fast', history_seconds: 60 });
    expect(bad).toBeInstanceOf(ProtocolProblem);
    expect((bad as ProtocolProblem).message).toContain('reply(configure).result.interval');
    expect(parseResult('snapshot', { type: 'sample' })).toBeInstanceOf(ProtocolProblem);
  });

  it('builds the open message', () => {
    expect(makeOpen(1, 600, 'jupyterlab-gpumem 0.1.0')).toEqual({
      type: 'open',
      protocol: 1,
      interval: 1,
      history_seconds: 600,
      client: 'jupyterlab-gpumem 0.1.0'
    });
  });
});
