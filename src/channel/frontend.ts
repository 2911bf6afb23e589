/**
 * The main-thread actions: clear, the last OOM's checklist, a checklist for an OOM text.
 *
 * They walk and change the user's objects, so the kernel runs them on its main thread, queued behind a
 * running cell — not over the comm, which ipykernel ≥ 7 serves on a subshell thread concurrently with the
 * cell (gpumem_kernel/wire/schemas/README.md, "Main-thread actions"). The browser sends them like the bootstrap:
 * a silent execute whose `user_expressions` call `gpumem_kernel.channel.frontend.<call>`, which evaluates to a JSON
 * string `{"ok": true, ...}` or `{"ok": false, "error": "..."}`.
 *
 * Pure except `callFrontend`, which needs a kernel connection (tests pass a fake).
 */
import { parsePythonStrRepr, silentRequest } from './bootstrap';
import {
  clearPayloadProblem,
  type IClearPayload,
  type IOomPayload,
  oomPayloadProblem
} from '../wire/protocol';
import { isRecord } from '../wire/keywords';

/** `frontend.clear()`: the safe clear (never deletes user variables). */
export const CLEAR_CALL = "__import__('gpumem_kernel').frontend.clear()";

/** `frontend.last_oom()`: the checklist the kernel's handler showed for its last OOM. */
export const LAST_OOM_CALL = "__import__('gpumem_kernel').frontend.last_oom()";

/** The kernel reads at most this many characters of an OOM text. */
export const OOM_TEXT_LIMIT = 100000;

/**
 * `frontend.oom_from_text(text)`. The text goes in as a JSON string literal, which Python reads as a `str`
 * literal too; U+2028/U+2029 are escaped because JSON allows them raw and Python's tokenizer need not.
 */
export function oomFromTextCall(text: string): string {
  const literal = JSON.stringify(text.slice(0, OOM_TEXT_LIMIT)).replace(/[\u2028\u2029]/g, c =>
    c === '\u2028' ? '\\u2028' : '\\u2029'
  );
  return `__import__('gpumem_kernel').frontend.oom_from_text(${literal})`;
}

/** What one call came back with, before its answer is checked against a payload schema. */
export type FrontendOutcome =
  | { readonly kind: 'ok'; readonly answer: Record<string, unknown> }
  /** A cell queued before ours failed and the kernel aborted the rest of its queue: send it again. */
  | { readonly kind: 'aborted' }
  /** The package is not importable in the kernel: nothing to retry. */
  | { readonly kind: 'missing'; readonly message: string }
  | { readonly kind: 'failed'; readonly message: string };

function errorLine(value: Record<string, unknown>): string {
  const ename = typeof value.ename === 'string' ? value.ename : 'Error';
  const evalue = typeof value.evalue === 'string' ? value.evalue : '';
  return evalue ? `${ename}: ${evalue}` : ename;
}

/** Interpret the `execute_reply` content of a silent frontend call. */
export function interpretFrontendReply(content: unknown): FrontendOutcome {
  if (!isRecord(content)) {
    return { kind: 'failed', message: 'the kernel sent an empty execute reply' };
  }
  if (content.status === 'abort' || content.status === 'aborted') {
    return { kind: 'aborted' };
  }
  if (content.status === 'error') {
    return { kind: 'failed', message: `the kernel refused the request (${errorLine(content)})` };
  }
  const expressions = content.user_expressions;
  const result = isRecord(expressions) ? expressions.gpumem : undefined;
  if (!isRecord(result)) {
    return { kind: 'failed', message: 'the kernel did not evaluate the request (is it an IPython kernel?)' };
  }
  if (result.status === 'error') {
    const line = errorLine(result);
    if (/ModuleNotFoundError|ImportError|AttributeError/.test(line) && /gpumem_kernel|frontend/.test(line)) {
      return {
        kind: 'missing',
        message: `jupyterlab-gpumem is not installed (or too old) in this kernel's environment: ${line}`
      };
    }
    return { kind: 'failed', message: line };
  }
  const data = result.data;
  const text = isRecord(data) && typeof data['text/plain'] === 'string' ? data['text/plain'] : null;
  const json = text === null ? null : parsePythonStrRepr(text);
  let answer: unknown;
  try {
    answer = json === null ? undefined : (JSON.parse(json) as unknown);
  } catch {
    answer = undefined;
  }
  if (!isRecord(answer) || typeof answer.ok !== 'boolean') {
    return {
      kind: 'failed',
      message: `unexpected answer from gpumem_kernel: ${text === null ? 'nothing' : text.slice(0, 80)}`
    };
  }
  if (!answer.ok) {
    return {
      kind: 'failed',
      message: typeof answer.error === 'string' ? answer.error : 'the kernel side reported an error'
    };
  }
  return { kind: 'ok', answer };
}

/** A checked answer: the value, or one line saying what went wrong. */
export type Checked<T> =
  { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: string };

/** The report of `clear()`. */
export function clearReportOf(outcome: FrontendOutcome): Checked<IClearPayload> {
  if (outcome.kind !== 'ok') {
    return { ok: false, error: outcomeMessage(outcome) };
  }
  const problem = clearPayloadProblem(outcome.answer.report);
  return problem === null
    ? { ok: true, value: outcome.answer.report as IClearPayload }
    : { ok: false, error: `the clear report does not fit this extension: ${problem}` };
}

/** The checklist of `last_oom()` / `oom_from_text()`: null when the kernel knows of no OOM. */
export function oomPayloadOf(outcome: FrontendOutcome): Checked<IOomPayload | null> {
  if (outcome.kind !== 'ok') {
    return { ok: false, error: outcomeMessage(outcome) };
  }
  const oom = outcome.answer.oom;
  if (oom === null) {
    return { ok: true, value: null };
  }
  const problem = oomPayloadProblem(oom);
  return problem === null
    ? { ok: true, value: oom as IOomPayload }
    : { ok: false, error: `the checklist does not fit this extension: ${problem}` };
}

function outcomeMessage(outcome: Exclude<FrontendOutcome, { kind: 'ok' }>): string {
  return outcome.kind === 'aborted'
    ? 'the kernel aborted the request (a cell before it failed); try again'
    : outcome.message;
}

/** The part of a kernel connection a frontend call uses. */
export interface IExecutingKernel {
  requestExecute(
    content: ReturnType<typeof silentRequest>,
    disposeOnDone?: boolean
  ): { done: Promise<{ content: unknown }> };
}

/**
 * Send one call as a silent execute and wait for its reply (it queues behind a running cell: no timeout).
 * An aborted request is sent again after `retryDelayMs`, up to `attempts` times in all.
 */
export async function callFrontend(
  kernel: IExecutingKernel,
  expression: string,
  options: { attempts?: number; retryDelayMs?: number } = {}
): Promise<FrontendOutcome> {
  const attempts = options.attempts ?? 3;
  let outcome: FrontendOutcome = { kind: 'aborted' };
  for (let attempt = 1; attempt <= attempts; attempt++) {
    try {
      const reply = await kernel.requestExecute(silentRequest(expression), true).done;
      outcome = interpretFrontendReply(reply.content);
    } catch (error) {
      return { kind: 'failed', message: error instanceof Error ? error.message : String(error) };
    }
    if (outcome.kind !== 'aborted' || attempt === attempts) {
      break;
    }
    await new Promise(resolve => setTimeout(resolve, options.retryDelayMs ?? 1000));
  }
  return outcome;
}
