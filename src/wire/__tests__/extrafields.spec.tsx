/**
 * The rule on extra fields (gpumem_kernel/wire/schemas/README.md, "Extra fields"), as a user meets it: the
 * JupyterLab extension and the kernel package are installed separately and may be different versions.
 *
 * - A field this version's schemas do not name (a newer kernel's additive change) is ignored: the message or
 *   payload is accepted, the field is left where it is (not checked, not removed: a notebook saved afterwards
 *   still holds it), and the UI shows what it knows.
 * - Every field the schemas name is checked as they say: a wrong type or a missing field is refused, and a
 *   saved output that does not fit shows one line naming the field.
 * - What the kernel sends is held to the schemas as written (`additionalProperties: false`): the Python tests
 *   validate every message and payload it emits; here, Ajv on the same schemas refuses the extra field.
 */
import * as fs from 'fs';
import * as path from 'path';
import * as React from 'react';
import { act } from 'react';
import { createRoot, type Root } from 'react-dom/client';

import { analysisPayloadProblem, benchmarkPayloadProblem } from '../analysispayload';
import {
  clearPayloadProblem,
  type IHello,
  type ISample,
  OOM_MIME,
  oomPayloadProblem,
  parseKernelMessage,
  ProtocolProblem
} from '../protocol';
import { GpuMemOutputView } from '../../outputs/outputview';
import { untranslated } from '../../ui/i18n';
import * as fx from '../../__tests__/fixtures';
import * as payloads from '../../__tests__/payloads';
import { kernelRule, mutate } from './schemaajv';

(globalThis as { IS_REACT_ACT_ENVIRONMENT?: boolean }).IS_REACT_ACT_ENVIRONMENT = true;

const FIXTURE_DIR = path.join(__dirname, '..', '..', '__tests__', 'fixtures');

function fixture(name: string): unknown {
  return JSON.parse(fs.readFileSync(path.join(FIXTURE_DIR, `${name}.json`), 'utf8')) as unknown;
}

/** A newer kernel's additive change: a field this version does not know, at the top and deep inside. */
const FUTURE = { unit: 'celsius', readings: [61, 62] };

describe('a field the schemas do not name is ignored, and left in place', () => {
  it('in a hello', () => {
    const data = { ...(fx.wire(fx.hello) as IHello), features: FUTURE };
    const parsed = parseKernelMessage(data);
    expect(parsed).not.toBeInstanceOf(ProtocolProblem);
    expect(parsed).toBe(data);
    expect((parsed as unknown as Record<string, unknown>).features).toEqual(FUTURE);
    expect(kernelRule('hello.schema.json', data)).toBe(false);
  });

  it('in a sample, on a device', () => {
    const data = mutate(fx.wire(fx.sample()), 'gpu.devices.0.temperature', FUTURE);
    const parsed = parseKernelMessage(data) as ISample;
    expect(parsed).not.toBeInstanceOf(ProtocolProblem);
    expect(parsed.gpu.devices[0].total).toBe(fx.sample().gpu.devices[0].total);
    expect((parsed.gpu.devices[0] as unknown as Record<string, unknown>).temperature).toEqual(FUTURE);
    expect(kernelRule('sample.schema.json', data)).toBe(false);
  });

  it('in a history and in a reply result', () => {
    const history = mutate(fx.wire(fx.history()), 'samples.0.host.swap', 1);
    expect(parseKernelMessage(history)).not.toBeInstanceOf(ProtocolProblem);
    const reply = mutate(fx.wire(fx.snapshotReply()), 'result.kernel.threads', 12);
    expect(parseKernelMessage(reply)).not.toBeInstanceOf(ProtocolProblem);
    expect(kernelRule('reply.schema.json', reply)).toBe(false);
  });

  it('in the analysis, autobatch, benchmark, clear and OOM payloads', () => {
    const cases: Array<[(value: unknown) => string | null, string, unknown, string]> = [
      [analysisPayloadProblem, 'analysis.schema.json', fixture('analysis_target'), 'recommendations.current'],
      [analysisPayloadProblem, 'analysis.schema.json', fixture('analysis_target'), 'future'],
      [benchmarkPayloadProblem, 'benchmark.schema.json', fixture('benchmark_simulated'), 'picks.recommended'],
      [clearPayloadProblem, 'clear.schema.json', payloads.clearGpu(), 'devices.0'],
      [oomPayloadProblem, 'oom.schema.json', payloads.oom2x(), 'diagnosis.names']
    ];
    for (const [problem, schema, payload, at] of cases) {
      const data = mutate(payload, at === 'future' ? 'future' : `${at}.future`, FUTURE);
      const before = JSON.stringify(data);
      expect(problem(data)).toBeNull();
      expect(JSON.stringify(data)).toBe(before); // not removed: a saved notebook keeps it
      expect(kernelRule(schema, data)).toBe(false);
    }
  });
});

describe('every field the schemas name is still checked', () => {
  it.each<[string, unknown, string, string]>([
    ['hello', fx.hello, 'pid', 'hello.pid: expected a non-negative integer, got the string "1234"'],
    [
      'sample',
      fx.sample(),
      'gpu.devices.0.total',
      'sample.gpu.devices[0].total: expected a non-negative integer, got the string "16 GiB"'
    ],
    [
      'sample',
      fx.sample(),
      'kernel.torch',
      'sample.kernel.torch: expected an object, got the string "16 GiB"'
    ]
  ])('a wrong type in a %s is refused, naming the field (%s)', (type, message, at, line) => {
    const value = at === 'pid' ? '1234' : '16 GiB';
    const parsed = parseKernelMessage(mutate(fx.wire(message), at, value));
    expect(parsed).toBeInstanceOf(ProtocolProblem);
    expect((parsed as ProtocolProblem).messageType).toBe(type);
    expect((parsed as ProtocolProblem).message).toBe(line);
  });

  it('a wrong type in an analysis payload is refused even next to an extra field', () => {
    const data = mutate(
      mutate(fixture('analysis_target'), 'future', FUTURE),
      'recommendations.current.peak_bytes',
      '3 GiB'
    );
    expect(analysisPayloadProblem(data)).toBe(
      'analysis.recommendations.current.peak_bytes: expected an integer, got the string "3 GiB"'
    );
  });

  it('a missing field is refused: a value that could not be measured is sent as null', () => {
    expect(analysisPayloadProblem(mutate(fixture('analysis_target'), 'fit', undefined))).toBe(
      'analysis.fit: missing (a value that cannot be measured is sent as null)'
    );
  });
});

describe('what the user sees', () => {
  let container: HTMLDivElement;
  let root: Root;
  const node = document.createElement('div');

  beforeEach(() => {
    container = document.createElement('div');
    document.body.appendChild(container);
    root = createRoot(container);
  });

  afterEach(() => {
    act(() => root.unmount());
    container.remove();
  });

  function render(data: unknown): HTMLDivElement {
    act(() =>
      root.render(
        <GpuMemOutputView mimeType={OOM_MIME} data={data} trans={untranslated} host={null} node={node} />
      )
    );
    return container;
  }

  it('an OOM checklist from a newer kernel with an extra field is shown', () => {
    const payload = payloads.oom2x();
    const view = render(mutate(payload, 'steps.0.future', FUTURE));
    expect(view.querySelector('.jp-GpuMem-invalid')).toBeNull();
    expect(view.querySelectorAll('.jp-GpuMem-oomStep')).toHaveLength(payload.steps.length);
    expect(view.querySelector('.jp-GpuMem-oomStepTitle')?.textContent).toBe(payload.steps[0].title);
  });

  it('an OOM checklist with a field of the wrong type is one line naming the field', () => {
    const view = render(mutate(payloads.oom2x(), 'steps.0.title', 7));
    expect(view.querySelectorAll('.jp-GpuMem-invalid')).toHaveLength(1);
    expect(view.textContent).toBe(
      'This gpumem output cannot be shown by this version of the extension ' +
        '(oom.steps[0].title: expected a string of at least 1 character, got the number 7).'
    );
  });
});
