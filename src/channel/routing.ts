/**
 * Message routing for the bridge: every message of the `gpumem` comm is validated, then goes where it belongs —
 * a hello, the history and samples into what the router keeps of the kernel (its hello, the newest sample, the
 * sample buffer, the problems it reported), replies and errors to the requests they answer, anything the
 * wire format does not allow to the state machine (or, from a kernel of another protocol, to a stop).
 */
import { SampleBuffer } from './samplebuffer';
import { type PendingRequests, RequestError } from './requests';
import type { BridgeEvent } from './state';
import { isRecord } from '../wire/keywords';
import {
  type IHello,
  type IHoldersMessage,
  type ISample,
  parseKernelMessage,
  ProtocolProblem
} from '../wire/protocol';
import type { IGrowthState, IKernelProblem } from '../tokens';

/** How many kernel problems are kept for the panel. */
export const MAX_PROBLEMS = 20;

/** No growth known: no trend claimed, no re-run notice. */
export const NO_GROWTH: IGrowthState = { running: null, rerun: null, rerunTime: null };

export namespace MessageRouter {
  export interface IOptions {
    /** The history window in seconds. */
    historySeconds: number;
    /** The requests waiting for their replies. */
    requests: PendingRequests;
    /** Feed an event to the bridge's state machine. */
    apply: (event: BridgeEvent) => void;
    /** The sampler's interval as the state knows it. */
    interval: () => number;
    /** A hello arrived: send the kernel the settings it starts without. */
    greeted: () => void;
    /** A sample arrived. */
    sampled: () => void;
    /** Nothing more of this kernel can be understood: stop talking to it, for `reason`. */
    stop: (reason: string) => void;
    /** What the router keeps (or the requests waiting) changed. */
    changed: () => void;
  }
}

export class MessageRouter {
  constructor(options: MessageRouter.IOptions) {
    this._options = options;
    this.samples = new SampleBuffer(options.historySeconds);
  }

  /** The samples of the window the panel's chart shows. */
  readonly samples: SampleBuffer;

  /** The kernel's `hello`, once the comm is open. */
  get hello(): IHello | null {
    return this._hello;
  }

  /** The newest sample (even one older than the history's newest, after a clock step). */
  get latest(): ISample | null {
    return this._latest;
  }

  /** Recent problems the kernel side reported, oldest first. */
  get problems(): ReadonlyArray<IKernelProblem> {
    return this._problems;
  }

  /** Memory that keeps growing: the running cell's trend and the newest re-run notice. */
  get growth(): IGrowthState {
    return this._growth;
  }

  /** Which variables hold GPU memory after the kernel's last cell (its newest `holders` message), or null. */
  get holders(): IHoldersMessage | null {
    return this._holders;
  }

  /** Forget everything the kernel said (another kernel process: the old samples describe something else). */
  forget(): void {
    this.samples.clear();
    this._latest = null;
    this._hello = null;
    this._problems = [];
    this._holders = null;
    this._growth = NO_GROWTH;
  }

  /** Validate one message of the comm and route it. */
  route(data: unknown): void {
    const options = this._options;
    const message = parseKernelMessage(data);
    if (message instanceof ProtocolProblem) {
      this._onProblem(message, data);
      return;
    }
    switch (message.type) {
      case 'hello':
        this._hello = message;
        this._holders = null; // a new comm: the kernel sends its last one after the history
        options.apply({
          type: 'hello',
          protocol: message.protocol,
          version: message.version,
          interval: message.interval,
          now: Date.now()
        });
        options.greeted();
        break;
      case 'history':
        this.samples.merge(message.samples);
        if (this._latest === null || (this.samples.latest?.time ?? 0) > this._latest.time) {
          this._latest = this.samples.latest;
        }
        break;
      case 'sample':
        this.samples.push(message);
        this._latest = message;
        for (const text of message.errors) {
          this._addProblem(message.time, text);
        }
        options.apply({ type: 'sample', now: Date.now() });
        options.sampled();
        break;
      case 'growth':
        // `running` is the trend now (null ends one); a notice stays until the next one.
        this._growth =
          message.rerun === null
            ? { ...this._growth, running: message.running }
            : { running: message.running, rerun: message.rerun, rerunTime: message.time };
        break;
      case 'holders':
        this._holders = message;
        break;
      case 'reply':
        // A reply to a request that timed out or was cancelled is ignored.
        options.requests.settle(message);
        return;
      case 'error':
        if (message.id !== null && options.requests.has(message.id)) {
          options.requests.fail(message.id, new RequestError(message.code, message.message));
          return;
        }
        this._addProblem(Date.now() / 1000, `${message.code}: ${message.message}`);
        console.warn(`jupyterlab-gpumem: kernel reported ${message.code}: ${message.message}`);
        break;
    }
    options.changed();
  }

  private _addProblem(time: number, text: string): void {
    this._problems = [...this._problems, { time, text }].slice(-MAX_PROBLEMS);
  }

  private _onProblem(problem: ProtocolProblem, data: unknown): void {
    const options = this._options;
    if (problem.kernelProtocol !== null) {
      options.apply({
        type: 'hello',
        protocol: problem.kernelProtocol,
        version: isRecord(data) && typeof data.version === 'string' ? data.version : '?',
        interval: options.interval(),
        now: Date.now()
      });
      // Nothing more we can understand will come: stop the kernel's sampler.
      options.stop(problem.message);
      return;
    }
    console.warn(`jupyterlab-gpumem: ignored a kernel message: ${problem.message}`);
    if (problem.unknownType) {
      return; // a newer kernel's additional message: harmless
    }
    const id = isRecord(data) ? data.id : undefined;
    if (typeof id === 'string' && options.requests.has(id)) {
      options.requests.fail(id, new RequestError('invalid-reply', problem.message));
      return;
    }
    options.apply({ type: 'protocol-problem', message: problem.message });
    options.changed();
  }

  private readonly _options: MessageRouter.IOptions;
  private _hello: IHello | null = null;
  private _latest: ISample | null = null;
  private _problems: ReadonlyArray<IKernelProblem> = [];
  private _holders: IHoldersMessage | null = null;
  private _growth: IGrowthState = NO_GROWTH;
}
