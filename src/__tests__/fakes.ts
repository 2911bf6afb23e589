/**
 * Just enough of JupyterLab's session context, kernel connection and comm for the bridge: signals are real
 * (@lumino/signaling), everything else is recorded so tests can assert what was sent.
 */
import type { ISessionContext } from '@jupyterlab/apputils';
import type { Kernel } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

/** What `requestExecute` answers for an expression (an execute_reply content), or a pending promise. */
export type Answer = (expression: string) => unknown;

function future(): { done: Promise<undefined> } {
  return { done: Promise.resolve(undefined) };
}

export class FakeComm {
  constructor(
    readonly targetName: string,
    readonly commId: string
  ) {}

  isDisposed = false;
  opened: unknown[] = [];
  sent: unknown[] = [];
  closed = false;
  onMsg: (msg: { content: { comm_id: string; data: unknown } }) => void = () => undefined;
  onClose: (msg: unknown) => void = () => undefined;

  open(data: unknown): { done: Promise<undefined> } {
    this.opened.push(data);
    return future();
  }

  send(data: unknown): { done: Promise<undefined> } {
    if (this.isDisposed) {
      throw new Error('Cannot send');
    }
    this.sent.push(data);
    return future();
  }

  /** Like CommHandler.close: calls onClose, then disposes. */
  close(): { done: Promise<undefined> } {
    if (this.isDisposed) {
      throw new Error('Cannot close');
    }
    this.closed = true;
    this.onClose({});
    this.isDisposed = true;
    return future();
  }

  /** Dispose locally (no message to the kernel, no onClose), as JupyterLab does on a restart. */
  dispose(): void {
    this.isDisposed = true;
  }

  /** A comm_msg from the kernel. */
  receive(data: unknown): void {
    this.onMsg({ content: { comm_id: this.commId, data: JSON.parse(JSON.stringify(data)) } });
  }

  /** A comm_close from the kernel, with its data (e.g. `{ reason: 'quiet' }`). */
  closeFromKernel(data: unknown = {}): void {
    this.onClose({ content: { comm_id: this.commId, data } });
    this.isDisposed = true;
  }
}

export class FakeKernel {
  constructor(
    readonly id: string,
    language = 'python',
    answer: Answer = okAnswer()
  ) {
    this.info = Promise.resolve({ language_info: { name: language } });
    this.answer = answer;
  }

  status: Kernel.Status = 'idle';
  connectionStatus: Kernel.ConnectionStatus = 'connected';
  isDisposed = false;
  /** Kernel info requests sent after the first (JupyterLab's own, at connect, is not counted). */
  kernelInfoRequests = 0;
  readonly info: Promise<{ language_info: { name: string } }>;
  answer: Answer;
  executed: Array<Record<string, unknown>> = [];
  comms: FakeComm[] = [];
  /** Every message sent or received, as JupyterLab's kernel connection reports it (`Kernel.IAnyMessageArgs`). */
  readonly anyMessage = new Signal<this, unknown>(this);

  requestExecute(content: Record<string, unknown>): { done: Promise<{ content: unknown }> } {
    this.executed.push(content);
    const expressions = content.user_expressions as Record<string, string>;
    const reply = this.answer(expressions.gpumem);
    return { done: Promise.resolve(reply).then(c => ({ content: c })) };
  }

  requestKernelInfo(): Promise<undefined> {
    this.kernelInfoRequests++;
    return Promise.resolve(undefined);
  }

  createComm(targetName: string): FakeComm {
    const comm = new FakeComm(targetName, `comm-${this.comms.length + 1}`);
    this.comms.push(comm);
    return comm;
  }

  get comm(): FakeComm {
    return this.comms[this.comms.length - 1];
  }

  /** The expressions evaluated so far. */
  get expressions(): string[] {
    return this.executed.map(c => (c.user_expressions as Record<string, string>).gpumem);
  }
}

/** A reply content whose user expression evaluated to `text`. */
export function textReply(text: string): unknown {
  return {
    status: 'ok',
    execution_count: 0,
    user_expressions: { gpumem: { status: 'ok', data: { 'text/plain': text }, metadata: {} } }
  };
}

/** The reply content of a frontend call whose answer is `answer` (as Python's `repr(json.dumps(answer))`). */
export function answerReply(answer: unknown): unknown {
  const json = JSON.stringify(answer);
  return textReply(`'${json.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`);
}

export function errorReply(ename: string, evalue: string): unknown {
  return {
    status: 'ok',
    execution_count: 0,
    user_expressions: { gpumem: { status: 'error', ename, evalue, traceback: [] } }
  };
}

/** Answers the bootstrap with version 0.1.0 / protocol `protocol`, and the loaded check with `loaded`. */
export function okAnswer(protocol = 1, loaded = true): Answer {
  return expression =>
    expression.includes('_bootstrap')
      ? textReply(`'{"version": "0.1.0", "protocol": ${protocol}}'`)
      : textReply(loaded ? 'True' : 'False');
}

export const missingAnswer: Answer = () =>
  errorReply('ModuleNotFoundError', "No module named 'gpumem_kernel'");

export class FakeSessionContext {
  constructor(kernel: FakeKernel | null, path = 'train.ipynb') {
    this.session = kernel ? { kernel } : null;
    this.path = path;
    this.name = path;
  }

  session: { kernel: FakeKernel | null } | null;
  readonly path: string;
  readonly name: string;
  kernelDisplayName = 'Python 3 (ipykernel)';
  isReady = true;
  ready: Promise<void> = Promise.resolve();
  isDisposed = false;
  readonly kernelChanged = new Signal<this, unknown>(this);
  readonly statusChanged = new Signal<this, Kernel.Status>(this);
  readonly iopubMessage = new Signal<this, { header: { msg_type: string } }>(this);
  readonly disposed = new Signal<this, void>(this);

  get kernel(): FakeKernel {
    const kernel = this.session?.kernel;
    if (!kernel) {
      throw new Error('no kernel');
    }
    return kernel;
  }

  /** As ISessionContext, for code under test. */
  get asContext(): ISessionContext {
    return this as unknown as ISessionContext;
  }

  changeKernel(kernel: FakeKernel | null): void {
    const old = this.session?.kernel ?? null;
    this.session = kernel ? { kernel } : this.session ? { kernel: null } : null;
    this.kernelChanged.emit({ name: 'kernel', oldValue: old, newValue: kernel });
  }

  setStatus(status: Kernel.Status): void {
    this.kernel.status = status;
    this.statusChanged.emit(status);
  }

  /** The user ran a cell (non-silent executions broadcast execute_input). */
  userRunsCell(): void {
    this.setStatus('busy');
    this.iopubMessage.emit({ header: { msg_type: 'execute_input' } });
    this.setStatus('idle');
  }

  dispose(): void {
    this.isDisposed = true;
    this.disposed.emit();
  }
}
