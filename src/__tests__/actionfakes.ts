/**
 * Fakes for the actions: a session context that speaks IOPub and restarts, a bridge whose samples the test
 * controls, and a host that records what JupyterLab would have been asked to do.
 */
import type { Kernel } from '@jupyterlab/services';
import { Signal } from '@lumino/signaling';

import type { IOomError } from '../actions/oom/detect';
import type {
  IHello,
  IHostMemory,
  IKernelExit,
  IRequestArgs,
  IRequestResults,
  ISample,
  RequestAction
} from '../wire/protocol';
import type { CellPlace, IActionHost, IDeathAnswer } from '../actions/actionhost';
import type { IBridgeView, ISessionActions } from '../tokens';
import { DEFAULT_SETTINGS, type IGpuMemSettings } from '../settings';
import { untranslated } from '../ui/i18n';
import { FakeKernel, FakeSessionContext } from './fakes';

/** An IOPub message of the failing cell `parent`. */
export function iopub(
  msgType: string,
  parent: string,
  content: unknown
): {
  header: { msg_type: string };
  parent_header: { msg_id: string };
  content: unknown;
} {
  return { header: { msg_type: msgType }, parent_header: { msg_id: parent }, content };
}

/** A session context whose kernel can be restarted (the restart itself is up to the test). */
export class ActionSessionContext extends FakeSessionContext {
  constructor(kernel: FakeKernel, path = 'train.ipynb') {
    super(kernel, path);
  }

  restarts = 0;
  /** Run by restartKernel(), after the status goes to 'restarting' (the new kernel's data arrive here). */
  onRestart: () => void = () => undefined;

  async restartKernel(): Promise<void> {
    this.restarts++;
    this.statusChanged.emit('restarting' as Kernel.Status);
    await Promise.resolve();
    this.onRestart();
    this.statusChanged.emit('idle');
  }

  /** Emit an IOPub message. */
  emitIopub(msgType: string, parent: string, content: unknown): void {
    (this.iopubMessage as Signal<this, unknown>).emit(iopub(msgType, parent, content));
  }
}

/** A bridge whose hello and samples the test sets; requests answered by `answer`. */
export class FakeBridge implements IBridgeView {
  constructor(
    public hello: IHello | null,
    public latest: ISample | null
  ) {}

  readonly dataChanged = new Signal<this, void>(this);
  requests: Array<{ action: string; args: unknown }> = [];
  answer: (action: RequestAction, args: unknown) => unknown = () => {
    throw new Error('no answer');
  };

  request<A extends RequestAction>(action: A, args?: IRequestArgs[A]): Promise<IRequestResults[A]> {
    this.requests.push({ action, args });
    try {
      return Promise.resolve(this.answer(action, args) as IRequestResults[A]);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** New data arrived. */
  set(hello: IHello | null, latest: ISample | null): void {
    this.hello = hello;
    this.latest = latest;
    this.dataChanged.emit();
  }
}

/** Records what JupyterLab would have been asked to do. */
export class FakeHost implements IActionHost {
  readonly trans = untranslated;
  settingsValue: IGpuMemSettings = { ...DEFAULT_SETTINGS };
  confirmAnswer = true;
  confirms: boolean[] = [];
  notified: IOomError[] = [];
  clearedOutputs = 0;
  inserted: Array<{ code: string; place: CellPlace }> = [];
  insertResult = true;
  shutDown: string[] = [];

  settings(): IGpuMemSettings {
    return this.settingsValue;
  }

  confirmRestart(_: ISessionActions, clearOutputs: boolean): Promise<boolean> {
    this.confirms.push(clearOutputs);
    return Promise.resolve(this.confirmAnswer);
  }

  notifyOom(_: ISessionActions, error: IOomError): void {
    this.notified.push(error);
  }

  clearOutputs(): void {
    this.clearedOutputs++;
  }

  insertCell(_: ISessionActions, code: string, place: CellPlace): boolean {
    this.inserted.push({ code, place });
    return this.insertResult;
  }

  shutDownKernel(kernelId: string): Promise<boolean> {
    this.shutDown.push(kernelId);
    return Promise.resolve(true);
  }

  /** The server's answers to "why did it die", one per ask (the last one repeats); null: no extension. */
  deathAnswers: Array<IDeathAnswer | null> = [null];
  deathAsks: Array<{ kernelId: string; pid: number | null; host: IHostMemory | null }> = [];
  oomKills: Array<{ death: IKernelExit; summary: ReadonlyArray<string> }> = [];

  kernelExit(kernelId: string, pid: number | null, host: IHostMemory | null): Promise<IDeathAnswer | null> {
    this.deathAsks.push({ kernelId, pid, host });
    const answer = this.deathAnswers[Math.min(this.deathAsks.length, this.deathAnswers.length) - 1];
    return Promise.resolve(answer ?? null);
  }

  notifyOomKill(_: ISessionActions, death: IKernelExit, summary: ReadonlyArray<string>): void {
    this.oomKills.push({ death, summary });
  }
}

/** Let promise callbacks and zero-delay timers run. */
export async function flush(times = 10): Promise<void> {
  for (let i = 0; i < times; i++) {
    await new Promise<void>(resolve => setTimeout(resolve, 0));
  }
}
