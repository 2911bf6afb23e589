/**
 * Request and reply over the `gpumem` comm: each request gets an id, waits for the reply with that id (or for
 * an error naming it) until its timeout, and has its result checked against the wire format. Requests fail
 * with a `RequestError` when the comm goes away; pings go out under the same numbering without waiting.
 */
import type { Kernel } from '@jupyterlab/services';
import type { JSONObject } from '@lumino/coreutils';

import {
  type ErrorCode,
  type IReply,
  type IRequestArgs,
  type IRequestMessage,
  type IRequestResults,
  parseResult,
  ProtocolProblem,
  type RequestAction
} from '../wire/protocol';

/** Why a request failed: the kernel's error code, or what went wrong on the way. */
export type RequestErrorCode = ErrorCode | 'timeout' | 'disconnected' | 'invalid-reply';

/** A request that did not get a valid reply. */
export class RequestError extends Error {
  constructor(
    readonly code: RequestErrorCode,
    message: string
  ) {
    super(message);
    this.name = 'RequestError';
  }
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

interface IPending {
  readonly action: RequestAction;
  readonly timer: ReturnType<typeof setTimeout>;
  settle(reply: IReply): void;
  fail(error: RequestError): void;
}

export namespace PendingRequests {
  export interface IOptions {
    /** Called whenever a request is added or removed. */
    changed: () => void;
    /** Called with the sampler's interval from a `configure` reply, before the request resolves. */
    configured: (interval: number) => void;
  }
}

/** The requests sent and not yet answered, by id. */
export class PendingRequests {
  constructor(options: PendingRequests.IOptions) {
    this._changed = options.changed;
    this._configured = options.configured;
  }

  /** How many requests wait for their reply. */
  get size(): number {
    return this._pending.size;
  }

  /** True while the request with this id waits for its reply. */
  has(id: string): boolean {
    return this._pending.has(id);
  }

  /**
   * Send a request over `comm` and wait for its reply.
   *
   * Rejects with a `RequestError`: the kernel's error code, 'timeout', 'disconnected' (the comm went away)
   * or 'invalid-reply' (the result does not match the wire format).
   */
  send<A extends RequestAction>(
    comm: Kernel.IComm,
    action: A,
    args: IRequestArgs[A] | undefined,
    timeoutMs: number
  ): Promise<IRequestResults[A]> {
    const id = `r-${++this._requestCount}`;
    const message: IRequestMessage = {
      type: 'request',
      id,
      action,
      args: (args ?? {}) as unknown as JSONObject
    };
    return new Promise<IRequestResults[A]>((resolve, reject) => {
      const finish = (): void => {
        clearTimeout(this._pending.get(id)?.timer);
        this._pending.delete(id);
        this._changed();
      };
      const timer = setTimeout(() => {
        if (this._pending.has(id)) {
          finish();
          reject(
            new RequestError('timeout', `no reply to "${action}" within ${Math.round(timeoutMs / 1000)} s`)
          );
        }
      }, timeoutMs);
      this._pending.set(id, {
        action,
        timer,
        settle: reply => {
          finish();
          if (reply.action !== action) {
            reject(new RequestError('invalid-reply', `reply to "${action}" says "${reply.action}"`));
            return;
          }
          const result = parseResult(action, reply.result);
          if (result instanceof ProtocolProblem) {
            reject(new RequestError('invalid-reply', result.message));
          } else {
            if (action === 'configure') {
              this._configured((result as IRequestResults['configure']).interval);
            }
            resolve(result);
          }
        },
        fail: error => {
          finish();
          reject(error);
        }
      });
      this._changed();
      try {
        comm.send(message as unknown as JSONObject).done.catch(() => undefined);
      } catch (error) {
        this._pending.get(id)?.fail(new RequestError('disconnected', messageOf(error)));
      }
    });
  }

  /**
   * Send a `ping` without waiting for its reply (its reply, matching no request, is ignored). Throws when the
   * kernel connection is gone.
   */
  sendPing(comm: Kernel.IComm): void {
    const message: IRequestMessage = {
      type: 'request',
      id: `p-${++this._requestCount}`,
      action: 'ping',
      args: {}
    };
    comm.send(message as unknown as JSONObject).done.catch(() => undefined);
  }

  /** Resolve the request a reply answers (a reply to a request that timed out or was cancelled is ignored). */
  settle(reply: IReply): void {
    this._pending.get(reply.id)?.settle(reply);
  }

  /** Fail the request with this id, if it still waits. */
  fail(id: string, error: RequestError): void {
    this._pending.get(id)?.fail(error);
  }

  /** Fail every waiting request as 'disconnected', for `reason`. */
  failAll(reason: string): void {
    for (const pending of [...this._pending.values()]) {
      pending.fail(new RequestError('disconnected', reason));
    }
  }

  private readonly _changed: () => void;
  private readonly _configured: (interval: number) => void;
  private readonly _pending = new Map<string, IPending>();
  private _requestCount = 0;
}
