/**
 * @jest-environment node
 *
 * The generated checks (src/wire/protocol.ts's guards) against the JSON Schemas themselves, run by Ajv: the
 * fixtures must be valid under both, and for every targeted mutation both must agree (agreement.spec.ts tries
 * every single change). Extra fields are the one difference, by design: the schemas as written (what the kernel
 * must send) refuse them, the browser ignores them (README.md beside the schemas, "Extra fields").
 */
import {
  clearPayloadProblem,
  isClearPayload,
  isError,
  isHello,
  isHistory,
  isOomPayload,
  isReply,
  isSample,
  oomPayloadProblem,
  parseResult,
  ProtocolProblem
} from '../protocol';
import * as fx from '../../__tests__/fixtures';
import * as payloads from '../../__tests__/payloads';
import { kernelRule as valid, mutate } from './schemaajv';

describe('fixtures match the kernel side’s JSON Schemas', () => {
  it.each([
    ['hello.schema.json', fx.hello],
    ['hello.schema.json', fx.helloWithoutCreateTime()],
    ['sample.schema.json', fx.sample()],
    ['sample.schema.json', fx.sample(0)],
    ['sample.schema.json', fx.noGpuSample()],
    [
      'sample.schema.json',
      { ...fx.sample(), gpu: { ...fx.sample().gpu, devices: [fx.migSlice(), fx.unreadableDevice()] } }
    ],
    ['history.schema.json', fx.history()],
    ['reply.schema.json', fx.snapshotReply()],
    ['reply.schema.json', fx.configureReply()],
    ['reply.schema.json', { type: 'reply', id: 'r-2', action: 'children', result: fx.childrenResult() }],
    ['reply.schema.json', { type: 'reply', id: 'r-3', action: 'processes', result: fx.processesResult() }],
    ['reply.schema.json', { type: 'reply', id: 'r-4', action: 'terminate', result: fx.terminateResult() }],
    ['error.schema.json', fx.errorReply()],
    ['error.schema.json', fx.errorReply(null)]
  ])('%s %#', (schema, message) => {
    expect(valid(schema, fx.wire(message))).toBe(true);
  });

  it('the open message the bridge sends is valid', () => {
    expect(
      valid('open.schema.json', {
        type: 'open',
        protocol: 1,
        interval: 1,
        history_seconds: 600,
        client: 'jupyterlab-gpumem 0.1.0'
      })
    ).toBe(true);
  });

  it('the requests the bridge sends are valid', () => {
    const requests = [
      { type: 'request', id: 'r-1', action: 'snapshot', args: {} },
      { type: 'request', id: 'r-2', action: 'configure', args: { interval: 0.5, history_seconds: 600 } },
      { type: 'request', id: 'r-3', action: 'children', args: {} },
      {
        type: 'request',
        id: 'r-4',
        action: 'terminate',
        args: { pids: [{ pid: 4321, create_time: 1763855000.25 }] }
      }
    ];
    for (const request of requests) {
      expect(valid('request.schema.json', request)).toBe(true);
    }
  });
});

describe('the generated checks agree with the schemas', () => {
  const sampleMutations: Array<[string, unknown]> = [
    ['seq', -1],
    ['seq', 1.5],
    ['time', '12:00'],
    ['gpu.available', null],
    ['gpu.device_order', 'RANDOM'],
    ['gpu.visible_devices', undefined],
    ['gpu.devices.0.name', null],
    ['gpu.devices.0.total', null],
    ['gpu.devices.0.total', -5],
    ['gpu.devices.0.util_gpu', 101],
    ['gpu.devices.0.util_gpu', 37.5],
    ['gpu.devices.0.compute_capability', 'sm_89'],
    ['gpu.devices.0.sm_count', null],
    ['gpu.devices.0.allocator', null],
    ['gpu.devices.0.allocator.num_ooms', -1],
    ['gpu.devices.0.processes.0.name', null],
    ['gpu.devices.0.processes.0.kernel_id', undefined],
    ['kernel.gpu_used', null],
    ['kernel.torch.version', 3],
    ['host.container_limit', null],
    ['host.children.rss', 'many'],
    ['errors', []],
    ['errors', [1]]
  ];

  it.each(sampleMutations)('sample.%s = %p', (at, value) => {
    const data = mutate(fx.sample(), at, value);
    expect(isSample(data)).toBe(valid('sample.schema.json', data));
  });

  const helloMutations: Array<[string, unknown]> = [
    ['create_time', undefined],
    ['create_time', null],
    ['create_time', 'x'],
    ['ipykernel', null],
    ['python', null],
    ['interval', 0.05],
    ['history_seconds', 600.5],
    ['capabilities', ['sample', 3]]
  ];

  it.each(helloMutations)('hello.%s = %p', (at, value) => {
    const data = mutate(fx.hello, at, value);
    expect(isHello(data)).toBe(valid('hello.schema.json', data));
  });

  it.each<[string, unknown, string]>([
    ['id', null, 'error'],
    ['code', 'teapot', 'error'],
    ['id', undefined, 'error'],
    ['id', 7, 'reply'],
    ['result', 'x', 'reply']
  ])('%s = %p in %s', (at, value, type) => {
    const base = type === 'error' ? fx.errorReply() : fx.snapshotReply();
    const data = mutate(base, at, value);
    if (type === 'error') {
      expect(isError(data)).toBe(valid('error.schema.json', data));
    } else {
      expect(isReply(data) && !(parseResult('snapshot', data.result) instanceof ProtocolProblem)).toBe(
        valid('reply.schema.json', data)
      );
    }
  });

  it('history', () => {
    const bad = mutate(fx.history(), 'samples.0.gpu.devices.1.mig', 'no');
    expect(isHistory(bad)).toBe(false);
    expect(valid('history.schema.json', bad)).toBe(false);
  });

  it('extra fields: ignored here (additive changes), refused by the schemas as written', () => {
    const extra = mutate(fx.sample(), 'gpu.devices.0.temperature', 61);
    expect(isSample(extra)).toBe(true);
    expect(valid('sample.schema.json', extra)).toBe(false);
  });
});

describe('inline payloads: the clear report and the OOM checklist', () => {
  const { clearCpu, clearGpu, clearHoldersCpu, oom1x, oom2x, oomWithOtherKernel } = payloads;

  it.each([
    ['clear.schema.json', 'cpu', clearCpu()],
    ['clear.schema.json', 'cpu holders', clearHoldersCpu()],
    ['clear.schema.json', 'gpu', clearGpu()],
    ['oom.schema.json', '2.x', oom2x()],
    ['oom.schema.json', '1.x', oom1x()],
    ['oom.schema.json', 'other kernel', oomWithOtherKernel()]
  ])('%s %s is valid under both', (schema, _, payload) => {
    expect(valid(schema, payload)).toBe(true);
    expect(schema === 'clear.schema.json' ? isClearPayload(payload) : isOomPayload(payload)).toBe(true);
  });

  const clearMutations: Array<[string, unknown]> = [
    ['version', 2],
    ['dry_run', 'no'],
    ['traceback_freed', null],
    ['traceback_freed.kind', 'closure'],
    ['traceback_frames', -1],
    ['output_cache', {}],
    ['gc_collected', null],
    ['gc_collected', 1.5],
    ['devices.0.device', 'gpu0'],
    ['devices.0.reserved_after', null],
    ['devices.0.reserved_after', -1],
    ['devices.0.name', undefined],
    ['holders.0.shape', [64, -3]],
    ['holders.0.shape', null],
    ['holders.0.by_device', { 'cuda:0': 'a lot' }],
    ['holders.0.dtype', 7],
    ['holders_more', undefined],
    ['reclaimed', { 'cuda:0': null }],
    ['reclaimed', { gpu: 1 }],
    ['reclaimed', { 'cuda:1': 'x' }],
    ['notes', ['ok', 3]]
  ];

  it.each(clearMutations)('clear.%s = %p', (at, value) => {
    const data = mutate(clearGpu(), at, value);
    expect(isClearPayload(data)).toBe(valid('clear.schema.json', data));
  });

  const oomMutations: Array<[string, unknown]> = [
    ['version', 0],
    ['summary', []],
    ['summary', [3]],
    ['steps', []],
    ['info.format', '3.x'],
    ['info.backend', 'ROCm'],
    ['info.message', 'x'.repeat(2001)],
    ['info.message', 'x'.repeat(2000)],
    ['info.tried_to_allocate', -1],
    ['info.other_processes', [{ pid: 1, used: null }]],
    ['info.hint', 'garbage_collection_threshold'],
    ['info.hint', null],
    ['diagnosis.fragmentation', null],
    ['diagnosis.fragmentation.suggest', 'yes'],
    ['diagnosis.batch_size', 0],
    ['diagnosis.batch_size', 16],
    ['diagnosis.amp', 'off'],
    ['diagnosis.alloc_conf_var', 'PYTORCH_XPU_ALLOC_CONF'],
    ['diagnosis.names.model', undefined],
    ['diagnosis.host.low', null],
    ['diagnosis.input_size', { name: 'IMG_SIZE', value: 0, kind: 'image' }],
    ['diagnosis.input_size', { name: 'IMG_SIZE', value: 224, kind: 'image' }],
    ['steps.0.id', 'Clear GPU'],
    ['steps.0.title', ''],
    ['steps.0.action', 'format-disk'],
    ['steps.0.action', null],
    ['steps.0.kernel_id', undefined],
    ['steps.2.kernel_id', null],
    ['steps.2.kernel_id', ''],
    ['steps.5.code', null],
    ['steps.5.code', ''],
    ['steps.3.code', 'print(1)']
  ];

  it.each(oomMutations)('oom.%s = %p', (at, value) => {
    const data = mutate(oomWithOtherKernel(), at, value);
    expect(isOomPayload(data)).toBe(valid('oom.schema.json', data));
  });

  it('names the first field that does not fit', () => {
    expect(oomPayloadProblem(mutate(oom2x(), 'steps.5.code', null))).toBe(
      'oom.steps[5].code: expected a string of at least 1 character, got null'
    );
    expect(clearPayloadProblem(mutate(clearGpu(), 'reclaimed', { gpu: 1 }))).toBe(
      'clear.reclaimed: key "gpu": expected a string matching ^cuda:[0-9]+$, got the string "gpu"'
    );
    expect(oomPayloadProblem('<b>')).toBe('oom: expected an object, got the string "<b>"');
  });
});
