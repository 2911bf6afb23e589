/**
 * Recognising a GPU out-of-memory error on IOPub, in the browser.
 *
 * The kernel side shows the checklist itself when its handler is installed; the browser watches too, so the
 * user gets a notification and the panel's checklist whatever cell, magic or library raised the error, and
 * even when the extension was loaded after it. Pure: the watcher in oomchecklist.ts feeds it IOPub messages.
 * Which errors count is not decided here: the patterns are the kernel's (gpumem_kernel/oom/patterns.json, shipped
 * in the wheel and bundled here), and both sides are tested against one corpus of real messages
 * (tests/oom/corpus.json).
 */

import patterns from '../../../gpumem_kernel/oom/patterns.json';
import type { IOomError } from '../../types';

// Declared with the public interfaces' types (tokens.ts names the error of an OOM run).
export type { IOomError } from '../../types';

/**
 * The out-of-memory families, as gpumem_kernel/oom/patterns.json names them (a jest spec checks this list
 * against the file): PyTorch's CUDA/HIP caching allocator (`cuda_allocator`), its Intel (`xpu`) and Apple
 * (`mps`) backends, a CUDA/HIP call outside the allocator (`driver`), `cublas`, `cudnn`, `nccl`, XLA/JAX/
 * TensorFlow (`xla`), a library that gave up (`wrapper`: accelerate's batch-size finder, vLLM's KV cache) and
 * the host's RAM (`host`). Illegal memory accesses, device-side asserts and CUDNN_STATUS_INTERNAL_ERROR are not
 * out-of-memory errors.
 */
export const OOM_FAMILIES = [
  'cuda_allocator',
  'xpu',
  'mps',
  'driver',
  'cublas',
  'cudnn',
  'nccl',
  'xla',
  'wrapper',
  'host'
] as const;
export type OomFamily = (typeof OOM_FAMILIES)[number];

interface IPattern {
  readonly family: OomFamily;
  readonly regex: RegExp;
}

interface IName {
  readonly family: OomFamily;
  readonly regex: RegExp;
  readonly decides: boolean;
}

function asFamily(name: string): OomFamily {
  const family = OOM_FAMILIES.find(known => known === name);
  if (family === undefined) {
    throw new Error(`gpumem: unknown out-of-memory family ${JSON.stringify(name)} in patterns.json`);
  }
  return family;
}

/** The kernel's own patterns (one file for both sides), compiled once; `ignore_case` is the `i` flag. */
const PATTERNS: readonly IPattern[] = patterns.families.flatMap(entry =>
  entry.patterns.map(pattern => ({
    family: asFamily(entry.family),
    regex: new RegExp(pattern, 'ignore_case' in entry && entry.ignore_case === true ? 'i' : '')
  }))
);
/** Exception names that name a family: MemoryError, ResourceExhaustedError (decide), torch.OutOfMemoryError. */
const NAMES: readonly IName[] = patterns.exception_names.map(entry => ({
  family: asFamily(entry.family),
  regex: new RegExp(entry.pattern),
  decides: entry.decides
}));

function nameFamily(ename: string, decides: boolean): OomFamily | null {
  return NAMES.find(name => name.decides === decides && name.regex.test(ename))?.family ?? null;
}

/**
 * The family of an error with this name and value, or null when it is not an out-of-memory error: a name that
 * decides (MemoryError → host, ResourceExhaustedError → xla); else the earliest known message in the value;
 * else a fallback name (torch.OutOfMemoryError → cuda_allocator). The kernel's `classify(type_name, message)`
 * (gpumem_kernel/oom/classify.py) gives the same answer for the same pair.
 */
export function oomFamily(ename: string, evalue: string): OomFamily | null {
  const decided = nameFamily(ename, true);
  if (decided !== null) {
    return decided;
  }
  let best: { family: OomFamily; index: number } | null = null;
  for (const { family, regex } of PATTERNS) {
    const match = regex.exec(evalue);
    if (match !== null && (best === null || match.index < best.index)) {
      best = { family, index: match.index };
    }
  }
  if (best !== null) {
    return best.family;
  }
  return ename !== '' ? nameFamily(ename, false) : null;
}

/** True when an error with this name and value is an out-of-memory error of any family (host RAM included). */
export function isOomError(ename: string, evalue: string): boolean {
  return oomFamily(ename, evalue) !== null;
}

/** The fields of an IOPub message this module reads (JupyterLab's `KernelMessage.IIOPubMessage` fits). */
export interface IIopubLike {
  readonly header: { readonly msg_type: string };
  readonly parent_header: unknown;
  readonly content: unknown;
}

/** `value[key]` when value is an object (a message's header or content as the kernel sent it), else undefined. */
export function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined;
}

/** The failing request's msg_id of any IOPub message. */
export function parentIdOf(msg: IIopubLike): string | null {
  const id = field(msg.parent_header, 'msg_id');
  return typeof id === 'string' && id !== '' ? id : null;
}

// eslint-disable-next-line no-control-regex -- IOPub tracebacks carry colour codes
const ANSI = /\x1b\[[0-9;]*[A-Za-z]/g;
const DIRECT_CAUSE = 'The above exception was the direct cause of the following exception:';
/** The lines Python and IPython print between the exceptions of a chain, oldest exception first. */
const CHAIN_LINE =
  /^[ \t]*(The above exception was the direct cause of the following exception:|During handling of the above exception, another exception occurred:)[ \t]*$/m;
/** An exception line of a traceback ("RuntimeError: …"): unindented, where frames and code lines are not. */
const EXCEPTION_LINE = /^([A-Za-z_][\w.]*(?:Error|Exception))(?:: ?(.*))?$/;

/**
 * The out-of-memory error an error was raised from (`raise … from oom`), read from its IOPub traceback, or
 * null. PyTorch raises "DataLoader worker (pid(s) N) exited unexpectedly" from the worker's "… is killed by
 * signal: Killed.": only the cause, printed above the final error, names the signal. Only direct causes count,
 * nearest first, as the kernel follows `__cause__` (gpumem_kernel/oom/classify.py `oom_in_chain`); an error
 * raised while handling one ("During handling …") does not.
 */
export function oomCauseOf(traceback: unknown): { ename: string; evalue: string } | null {
  if (!Array.isArray(traceback) || !traceback.every(line => typeof line === 'string')) {
    return null;
  }
  const text = (traceback as string[]).join('\n').replace(ANSI, '');
  if (!text.includes(DIRECT_CAUSE)) {
    return null;
  }
  // [oldest section, line, section, …, line, the final error's section]
  const parts = text.split(CHAIN_LINE);
  for (let i = parts.length - 1; i >= 2 && parts[i - 1] === DIRECT_CAUSE; i -= 2) {
    const lines = parts[i - 2].split('\n');
    for (let at = 0; at < lines.length; at++) {
      const match = EXCEPTION_LINE.exec(lines[at]);
      if (match === null) {
        continue;
      }
      const evalue = [match[2] ?? '', ...lines.slice(at + 1)].join('\n').trim();
      if (isOomError(match[1], evalue)) {
        return { ename: match[1], evalue };
      }
    }
  }
  return null;
}

/**
 * The OOM in an IOPub message, or null when it is not an `error` message of an OOM: its own name and value,
 * else the out-of-memory error it was raised from (`oomCauseOf`), whose name and value are kept instead.
 */
export function oomErrorOf(msg: IIopubLike): IOomError | null {
  if (msg.header.msg_type !== 'error') {
    return null;
  }
  const ename = field(msg.content, 'ename');
  const evalue = field(msg.content, 'evalue');
  if (typeof ename !== 'string' || typeof evalue !== 'string') {
    return null;
  }
  const oom = isOomError(ename, evalue) ? { ename, evalue } : oomCauseOf(field(msg.content, 'traceback'));
  return oom !== null ? { ...oom, parentId: parentIdOf(msg) } : null;
}

/**
 * The OOM a checklist output names (`display_data` carrying the kernel's OOM MIME type), or null: the kernel's
 * handler knows more than the traceback shows. PyTorch's "DataLoader worker (pid(s) N) exited unexpectedly" raised
 * from a timed-out fetch names no signal; the kernel reads the worker's exit code (SIGKILL: the host's out-of-memory
 * killer) and its checklist's message says so. Only the name and message are read here; the payload itself is
 * fetched and validated as any checklist is.
 */
export function checklistErrorOf(msg: IIopubLike, mime: string): IOomError | null {
  if (msg.header.msg_type !== 'display_data') {
    return null;
  }
  const info = field(field(field(msg.content, 'data'), mime), 'info');
  const ename = field(info, 'exception');
  const evalue = field(info, 'message');
  if (typeof ename !== 'string' || typeof evalue !== 'string' || !isOomError(ename, evalue)) {
    return null;
  }
  return { ename, evalue, parentId: parentIdOf(msg) };
}

/** The text for `oom_from_text`: the error line as Python prints it ("OutOfMemoryError: CUDA out of …"). */
export function oomText(error: IOomError): string {
  return error.evalue ? `${error.ename}: ${error.evalue}` : error.ename;
}
