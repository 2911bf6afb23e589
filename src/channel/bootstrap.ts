/**
 * The silent bootstrap: how the browser loads the kernel side and learns its version.
 *
 * The bridge sends one `execute_request` with empty code, `silent: true` and `store_history: false` (so no
 * output and no execution count appear in the notebook) and reads the answer from `user_expressions`. This
 * module holds the expressions and turns the reply into an outcome; that part is pure so the odd cases (a
 * module that is missing, a dependency that is missing, an aborted request, a malformed answer) are
 * unit-tested. `runBootstrap` sends them to a kernel and feeds what it learns to the bridge's state machine.
 */
import type { Kernel } from '@jupyterlab/services';
import type { JSONObject } from '@lumino/coreutils';

import { messageOf } from './requests';
import type { BridgeEvent } from './state';
import { isRecord } from '../wire/keywords';

/** The key under which the bridge asks for its expression. */
export const EXPRESSION_KEY = 'gpumem';

/**
 * Imports the kernel package and loads the shim; evaluates to a JSON string `{"version": ..., "protocol": n}`.
 */
export const BOOTSTRAP_EXPRESSION = "__import__('gpumem_kernel')._bootstrap()";

/**
 * Used when autoload is off: tells whether the user has loaded the shim already, without importing anything.
 */
export const LOADED_EXPRESSION = "__import__('sys').modules.get('gpumem_kernel') is not None";

/** The execute request content of a silent evaluation of `expression`. */
export function silentRequest(expression: string): {
  code: string;
  silent: boolean;
  store_history: boolean;
  user_expressions: JSONObject;
  allow_stdin: boolean;
  stop_on_error: boolean;
} {
  return {
    code: '',
    silent: true,
    store_history: false,
    user_expressions: { [EXPRESSION_KEY]: expression },
    allow_stdin: false,
    stop_on_error: false
  };
}

/** What the bootstrap learned. */
export type BootstrapOutcome =
  | { readonly kind: 'ok'; readonly version: string; readonly protocol: number }
  | { readonly kind: 'missing'; readonly detail: string }
  | { readonly kind: 'failed'; readonly message: string }
  | { readonly kind: 'aborted' };

/** What the autoload-off check learned. */
export type LoadedOutcome =
  | { readonly kind: 'loaded'; readonly loaded: boolean }
  | { readonly kind: 'failed'; readonly message: string }
  | { readonly kind: 'aborted' };

/**
 * Undo Python's `repr()` of a `str`: "'{\"a\": 1}'" → '{"a": 1}'. Returns null when `text` is not a string
 * literal. Handles both quote styles and the escapes `repr` produces.
 */
export function parsePythonStrRepr(text: string): string | null {
  const t = text.trim();
  if (t.length < 2) {
    return null;
  }
  const quote = t[0];
  if ((quote !== "'" && quote !== '"') || t[t.length - 1] !== quote) {
    return null;
  }
  const body = t.slice(1, -1);
  let out = '';
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (c !== '\\') {
      if (c === quote) {
        return null; // an unescaped quote: not a single literal
      }
      out += c;
      continue;
    }
    const e = body[++i];
    switch (e) {
      case '\\':
      case "'":
      case '"':
        out += e;
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const width = e === 'x' ? 2 : e === 'u' ? 4 : 8;
        const hex = body.slice(i + 1, i + 1 + width);
        if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length !== width) {
          return null;
        }
        out += String.fromCodePoint(parseInt(hex, 16));
        i += width;
        break;
      }
      default:
        return null;
    }
  }
  return out;
}

/** One line from an error in a user expression: "ModuleNotFoundError: No module named 'gpumem_kernel'". */
function errorLine(result: Record<string, unknown>): { ename: string; line: string } {
  const ename = typeof result.ename === 'string' ? result.ename : 'Error';
  const evalue = typeof result.evalue === 'string' ? result.evalue : '';
  return { ename, line: evalue ? `${ename}: ${evalue}` : ename };
}

/** The `user_expressions[gpumem]` entry of an execute reply, or a failure when the reply has none. */
function expressionResult(
  content: unknown
):
  | { kind: 'result'; result: Record<string, unknown> }
  | { kind: 'aborted' }
  | { kind: 'failed'; message: string } {
  if (!isRecord(content)) {
    return { kind: 'failed', message: 'the kernel sent an empty execute reply' };
  }
  const status = content.status;
  if (status === 'abort' || status === 'aborted') {
    return { kind: 'aborted' };
  }
  if (status === 'error') {
    // The empty code cannot fail, so this is the kernel refusing the request.
    const { line } = errorLine(content);
    return { kind: 'failed', message: `the kernel refused the bootstrap request (${line})` };
  }
  const expressions = content.user_expressions;
  const result = isRecord(expressions) ? expressions[EXPRESSION_KEY] : undefined;
  if (!isRecord(result)) {
    return {
      kind: 'failed',
      message: 'the kernel did not evaluate the bootstrap expression (is it an IPython kernel?)'
    };
  }
  return { kind: 'result', result };
}

function textPlain(result: Record<string, unknown>): string | null {
  const data = result.data;
  if (!isRecord(data)) {
    return null;
  }
  const text = data['text/plain'];
  return typeof text === 'string' ? text : null;
}

/**
 * Interpret the execute reply content of the bootstrap expression.
 *
 * A `ModuleNotFoundError` naming `gpumem_kernel` means the package is not installed in the kernel's
 * environment; any other error (including a missing dependency of ours) is reported as it is.
 */
export function interpretBootstrapReply(content: unknown): BootstrapOutcome {
  const found = expressionResult(content);
  if (found.kind !== 'result') {
    return found;
  }
  const result = found.result;
  if (result.status === 'error') {
    const { ename, line } = errorLine(result);
    if ((ename === 'ModuleNotFoundError' || ename === 'ImportError') && /['"]gpumem_kernel['"]/.test(line)) {
      return { kind: 'missing', detail: line };
    }
    return { kind: 'failed', message: `loading gpumem_kernel failed: ${line}` };
  }
  const text = textPlain(result);
  const json = text === null ? null : parsePythonStrRepr(text);
  let parsed: unknown;
  try {
    parsed = json === null ? undefined : (JSON.parse(json) as unknown);
  } catch {
    parsed = undefined;
  }
  if (
    !isRecord(parsed) ||
    typeof parsed.version !== 'string' ||
    typeof parsed.protocol !== 'number' ||
    !Number.isInteger(parsed.protocol)
  ) {
    const shown = text === null ? 'nothing' : text.slice(0, 80);
    return {
      kind: 'failed',
      message: `unexpected answer from gpumem_kernel._bootstrap(): ${shown}`
    };
  }
  return { kind: 'ok', version: parsed.version, protocol: parsed.protocol };
}

/** Interpret the execute reply content of the autoload-off check (`True` / `False`). */
export function interpretLoadedReply(content: unknown): LoadedOutcome {
  const found = expressionResult(content);
  if (found.kind !== 'result') {
    return found;
  }
  if (found.result.status === 'error') {
    return { kind: 'failed', message: `checking for gpumem_kernel failed: ${errorLine(found.result).line}` };
  }
  const text = textPlain(found.result);
  return { kind: 'loaded', loaded: text !== null && text.trim() === 'True' };
}

/** How often an aborted bootstrap (a cell before it failed) is retried. */
const BOOTSTRAP_ATTEMPTS = 3;

function delay(ms: number): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

/** Evaluate one expression silently; returns the raw reply content (validated by the caller). */
async function evaluate(kernel: Kernel.IKernelConnection, expression: string): Promise<unknown> {
  const future = kernel.requestExecute(silentRequest(expression), true);
  const reply = await future.done;
  return reply.content;
}

export interface IBootstrapOptions {
  /** Only check whether the user has loaded the shim, and load it then (autoload off, no "Load now"). */
  readonly checkOnly: boolean;
  /** Delay before retrying a bootstrap the kernel aborted. */
  readonly retryDelayMs: number;
  /** Whether the kernel is still the bridge's (checked after every wait: nothing is applied once it is not). */
  readonly isCurrent: () => boolean;
  /** Feed what the bootstrap learned to the bridge's state machine. */
  readonly apply: (event: BridgeEvent) => void;
  /** The kernel side is loaded and speaks a protocol (after its `bootstrap-ok`): open the comm. */
  readonly loaded: () => void;
}

/**
 * Load the kernel side of `kernel` silently: when `checkOnly`, ask first whether the user loaded it; then run
 * the bootstrap expression, again when the kernel aborted it (a cell queued before it failed).
 */
export async function runBootstrap(
  kernel: Kernel.IKernelConnection,
  options: IBootstrapOptions
): Promise<void> {
  const { isCurrent, apply } = options;
  try {
    if (options.checkOnly) {
      const loaded = interpretLoadedReply(await evaluate(kernel, LOADED_EXPRESSION));
      if (!isCurrent()) {
        return;
      }
      if (loaded.kind === 'failed') {
        apply({ type: 'bootstrap-failed', message: loaded.message });
        return;
      }
      if (loaded.kind === 'aborted' || !loaded.loaded) {
        apply({ type: 'bootstrap-off' });
        return;
      }
    }
    let outcome: BootstrapOutcome = { kind: 'aborted' };
    for (let attempt = 1; attempt <= BOOTSTRAP_ATTEMPTS; attempt++) {
      outcome = interpretBootstrapReply(await evaluate(kernel, BOOTSTRAP_EXPRESSION));
      if (!isCurrent()) {
        return;
      }
      if (outcome.kind !== 'aborted' || attempt === BOOTSTRAP_ATTEMPTS) {
        break;
      }
      // A cell queued before ours failed and the kernel aborted the rest of its queue: try again.
      await delay(options.retryDelayMs);
      if (!isCurrent()) {
        return;
      }
    }
    switch (outcome.kind) {
      case 'ok':
        apply({ type: 'bootstrap-ok', version: outcome.version, protocol: outcome.protocol });
        options.loaded();
        return;
      case 'missing':
        apply({ type: 'bootstrap-missing', detail: outcome.detail });
        return;
      case 'failed':
        apply({ type: 'bootstrap-failed', message: outcome.message });
        return;
      case 'aborted':
        apply({
          type: 'bootstrap-failed',
          message: 'the kernel aborted the bootstrap request repeatedly; use Retry'
        });
        return;
    }
  } catch (error) {
    if (isCurrent()) {
      apply({ type: 'bootstrap-failed', message: `bootstrap: ${messageOf(error)}` });
    }
  }
}
