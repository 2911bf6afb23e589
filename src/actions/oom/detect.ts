/**
 * Recognising a CUDA out-of-memory error on IOPub, in the browser.
 *
 * The kernel side shows the checklist itself when its handler is installed; the browser watches too, so the
 * user gets a notification and the panel's checklist whatever cell, magic or library raised the error, and
 * even when the extension was loaded after it. Pure: the watcher in actions.ts feeds it IOPub messages.
 */

/** What the browser keeps of an OOM `error` message. */
export interface IOomError {
  readonly ename: string;
  readonly evalue: string;
  /** The failing request's msg_id (the cell's `execute_request`): follow-ups wait for its end. */
  readonly parentId: string | null;
}

/** PyTorch ≥ 1.13 raises `torch.OutOfMemoryError` (alias `torch.cuda.OutOfMemoryError`). */
const OOM_ENAME = /(^|\.)OutOfMemoryError$/;

/**
 * The texts PyTorch and CUDA use: "CUDA out of memory." (RuntimeError in 1.x, OutOfMemoryError since 1.13),
 * "HIP out of memory" / "XPU out of memory" on other builds, "CUDA error: out of memory" from a CUDA call
 * outside the caching allocator, and 0.x's "cuda runtime error (2) : out of memory".
 */
const OOM_TEXT = [
  /\b(CUDA|HIP|XPU) out of memory\b/,
  /\bCUDA error: out of memory\b/,
  /\bcuda runtime error \(2\) : out of memory\b/
];

/** True when an error with this name and value is a GPU out-of-memory error. */
export function isOomError(ename: string, evalue: string): boolean {
  return OOM_ENAME.test(ename) || OOM_TEXT.some(pattern => pattern.test(evalue));
}

/** The fields of an IOPub message this module reads (JupyterLab's `KernelMessage.IIOPubMessage` fits). */
export interface IIopubLike {
  readonly header: { readonly msg_type: string };
  readonly parent_header: unknown;
  readonly content: unknown;
}

function field(value: unknown, key: string): unknown {
  return typeof value === 'object' && value !== null ? (value as Record<string, unknown>)[key] : undefined;
}

/** The failing request's msg_id of any IOPub message. */
export function parentIdOf(msg: IIopubLike): string | null {
  const id = field(msg.parent_header, 'msg_id');
  return typeof id === 'string' && id !== '' ? id : null;
}

/** The OOM in an IOPub message, or null when it is not an `error` message of an OOM. */
export function oomErrorOf(msg: IIopubLike): IOomError | null {
  if (msg.header.msg_type !== 'error') {
    return null;
  }
  const ename = field(msg.content, 'ename');
  const evalue = field(msg.content, 'evalue');
  if (typeof ename !== 'string' || typeof evalue !== 'string' || !isOomError(ename, evalue)) {
    return null;
  }
  return { ename, evalue, parentId: parentIdOf(msg) };
}

/** The text for `oom_from_text`: the error line as Python prints it ("OutOfMemoryError: CUDA out of …"). */
export function oomText(error: IOomError): string {
  return error.evalue ? `${error.ename}: ${error.evalue}` : error.ename;
}
