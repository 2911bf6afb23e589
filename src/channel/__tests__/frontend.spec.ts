/**
 * @jest-environment node
 *
 * The main-thread calls: the expressions, how their replies are read (Python repr of a JSON string), and
 * retrying a request the kernel aborted.
 */
import {
  callFrontend,
  CLEAR_CALL,
  clearReportOf,
  interpretFrontendReply,
  LAST_OOM_CALL,
  OOM_TEXT_LIMIT,
  oomFromTextCall,
  oomPayloadOf
} from '../frontend';
import { answerReply, errorReply, FakeKernel, textReply } from '../../__tests__/fakes';
import { clearCpu, oom2x } from '../../__tests__/payloads';

describe('expressions', () => {
  it('call gpumem_kernel.channel.frontend', () => {
    expect(CLEAR_CALL).toBe("__import__('gpumem_kernel').frontend.clear()");
    expect(LAST_OOM_CALL).toBe("__import__('gpumem_kernel').frontend.last_oom()");
  });

  it('passes the OOM text as a JSON string literal Python can read', () => {
    const text = 'OutOfMemoryError: "quoted" \\ back\nline\u2028sep \u00e9 \u0007';
    const call = oomFromTextCall(text);
    const literal = call.slice("__import__('gpumem_kernel').frontend.oom_from_text(".length, -1);
    expect(JSON.parse(literal)).toBe(text);
    for (const raw of ['\n', '\u2028', '\u2029', '\u0007']) {
      expect(literal).not.toContain(raw);
    }
    expect(literal).toContain('\\u2028');
  });

  it('sends at most what the kernel reads', () => {
    const call = oomFromTextCall('x'.repeat(OOM_TEXT_LIMIT + 50));
    expect(call.length).toBeLessThan(OOM_TEXT_LIMIT + 100);
  });
});

describe('interpretFrontendReply', () => {
  it('reads an ok answer', () => {
    const outcome = interpretFrontendReply(answerReply({ ok: true, oom: null }));
    expect(outcome).toEqual({ kind: 'ok', answer: { ok: true, oom: null } });
    expect(oomPayloadOf(outcome)).toEqual({ ok: true, value: null });
  });

  it('reads escapes of the Python repr (quotes, backslashes, \\u)', () => {
    const report = clearCpu();
    report.notes = ['it\'s "quoted" \\ and \u00e9 <b>'];
    const outcome = interpretFrontendReply(answerReply({ ok: true, report }));
    expect(clearReportOf(outcome)).toEqual({ ok: true, value: report });
  });

  it('checks the payload against the schema', () => {
    const bad = { ...oom2x(), steps: [] };
    expect(oomPayloadOf(interpretFrontendReply(answerReply({ ok: true, oom: bad })))).toEqual({
      ok: false,
      error: 'the checklist does not fit this extension: oom.steps: expected at least 1 item, got 0'
    });
    expect(clearReportOf(interpretFrontendReply(answerReply({ ok: true, report: null })))).toMatchObject({
      ok: false
    });
  });

  it('reports the kernel side’s own error', () => {
    const outcome = interpretFrontendReply(
      answerReply({ ok: false, error: 'TypeError: text must be a string' })
    );
    expect(outcome).toEqual({ kind: 'failed', message: 'TypeError: text must be a string' });
    expect(clearReportOf(outcome)).toEqual({ ok: false, error: 'TypeError: text must be a string' });
  });

  it('tells a missing package from other failures', () => {
    expect(
      interpretFrontendReply(errorReply('ModuleNotFoundError', "No module named 'gpumem_kernel'")).kind
    ).toBe('missing');
    expect(
      interpretFrontendReply(
        errorReply('AttributeError', "module 'gpumem_kernel' has no attribute 'frontend'")
      ).kind
    ).toBe('missing');
    expect(interpretFrontendReply(errorReply('NameError', 'boom'))).toEqual({
      kind: 'failed',
      message: 'NameError: boom'
    });
  });

  it('recognises an aborted request and odd replies', () => {
    expect(interpretFrontendReply({ status: 'aborted' })).toEqual({ kind: 'aborted' });
    expect(interpretFrontendReply({ status: 'abort' })).toEqual({ kind: 'aborted' });
    expect(interpretFrontendReply(null).kind).toBe('failed');
    expect(interpretFrontendReply({ status: 'ok', user_expressions: {} }).kind).toBe('failed');
    expect(interpretFrontendReply(textReply('42')).kind).toBe('failed');
    expect(interpretFrontendReply(textReply("'not json'")).kind).toBe('failed');
  });
});

describe('callFrontend', () => {
  it('sends a silent execute and retries an aborted request', async () => {
    const replies = [{ status: 'aborted' }, answerReply({ ok: true, oom: null })];
    const kernel = new FakeKernel('k1', 'python', () => replies.shift());
    const outcome = await callFrontend(kernel as never, LAST_OOM_CALL, { retryDelayMs: 1 });
    expect(outcome.kind).toBe('ok');
    expect(kernel.expressions).toEqual([LAST_OOM_CALL, LAST_OOM_CALL]);
    expect(kernel.executed[0]).toMatchObject({
      code: '',
      silent: true,
      store_history: false,
      stop_on_error: false
    });
  });

  it('gives up after the last attempt', async () => {
    const kernel = new FakeKernel('k1', 'python', () => ({ status: 'aborted' }));
    expect(await callFrontend(kernel as never, CLEAR_CALL, { attempts: 2, retryDelayMs: 1 })).toEqual({
      kind: 'aborted'
    });
    expect(kernel.executed).toHaveLength(2);
  });

  it('turns a dead connection into a failure', async () => {
    const kernel = {
      requestExecute: () => ({ done: Promise.reject(new Error('Kernel is dead')) })
    };
    expect(await callFrontend(kernel, CLEAR_CALL)).toEqual({ kind: 'failed', message: 'Kernel is dead' });
  });
});
