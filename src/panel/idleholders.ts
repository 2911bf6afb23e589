/**
 * This server's kernels that hold GPU memory and have been idle longer than the `idleMinutes` setting.
 *
 * The facts come from the server extension's `GET /gpumem/kernels` (gpumem_kernel/server/handlers.py), not
 * from the current kernel's samples: only NVML on the server knows which kernel holds GPU memory whatever its
 * language, and whether the panel follows a kernel or not. `/api/kernels` alone has the idle time but not
 * the memory. Polled every 10 s while the panel is visible; idlefetch.ts reads the endpoint (kept apart so that
 * this module has no runtime import of @jupyterlab/*).
 */
import { type ISignal, Signal } from '@lumino/signaling';

/** One kernel of this server, as /gpumem/kernels describes it. */
export interface IServerKernel {
  readonly id: string;
  readonly name: string;
  /** Its session's notebook or console path; "" without a session. */
  readonly path: string;
  readonly execution_state: string;
  /** Seconds since its last activity while idle, 0 while busy or starting (the server's clock). */
  readonly idle_seconds: number;
  /** NVML bytes of the kernel's process and the processes it started, over every GPU. */
  readonly gpu_bytes: number;
}

export interface IServerKernels {
  readonly nvml_available: boolean;
  readonly reason: string | null;
  readonly kernels: ReadonlyArray<IServerKernel>;
}

/** Why the list is empty although it could not be read. */
export type IdleHoldersProblem = 'no-extension' | 'failed';

function isKernel(value: unknown): value is IServerKernel {
  const k = value as Record<string, unknown> | null;
  return (
    typeof k === 'object' &&
    k !== null &&
    typeof k.id === 'string' &&
    typeof k.path === 'string' &&
    typeof k.idle_seconds === 'number' &&
    typeof k.gpu_bytes === 'number'
  );
}

/** The endpoint's JSON, or null when it is not what the server extension sends. Unknown fields are ignored. */
export function parseServerKernels(value: unknown): IServerKernels | null {
  const v = value as Record<string, unknown> | null;
  if (typeof v !== 'object' || v === null || !Array.isArray(v.kernels)) {
    return null;
  }
  return {
    nvml_available: v.nvml_available === true,
    reason: typeof v.reason === 'string' ? v.reason : null,
    kernels: v.kernels.filter(isKernel).map(k => ({
      id: k.id,
      name: typeof k.name === 'string' ? k.name : '',
      path: k.path,
      execution_state: typeof k.execution_state === 'string' ? k.execution_state : 'unknown',
      idle_seconds: k.idle_seconds,
      gpu_bytes: k.gpu_bytes
    }))
  };
}

/** The kernels that hold GPU memory and have been idle longer than `idleMinutes`, longest idle first. */
export function idleHolders(kernels: ReadonlyArray<IServerKernel>, idleMinutes: number): IServerKernel[] {
  return kernels
    .filter(k => k.gpu_bytes > 0 && k.idle_seconds > idleMinutes * 60)
    .sort((a, b) => b.idle_seconds - a.idle_seconds);
}

export interface IIdleHoldersOptions {
  /** Reads the server's kernels: fetchServerKernels (idlefetch.ts), a stub in tests. */
  readonly fetch: () => Promise<IServerKernels | IdleHoldersProblem>;
  /** Milliseconds between reads while polling (default 10 s). */
  readonly intervalMs?: number;
}

/** Polls the server's kernels while started; `changed` fires after each read. */
export class IdleHoldersModel {
  constructor(options: IIdleHoldersOptions) {
    this._fetch = options.fetch;
    this._intervalMs = options.intervalMs ?? 10000;
  }

  /** Every kernel of the server from the last read (empty before the first one). */
  get kernels(): ReadonlyArray<IServerKernel> {
    return this._kernels;
  }

  /** Why the last read gave nothing, or null. */
  get problem(): IdleHoldersProblem | null {
    return this._problem;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Read now and then every interval, until stop(). Starting twice is harmless. */
  start(): void {
    if (this._timer === null) {
      void this.refresh();
      this._timer = setInterval(() => void this.refresh(), this._intervalMs);
    }
  }

  stop(): void {
    if (this._timer !== null) {
      clearInterval(this._timer);
      this._timer = null;
    }
  }

  /** One read (also after a kernel was shut down, so that it leaves the list at once). */
  async refresh(): Promise<void> {
    let result: IServerKernels | IdleHoldersProblem;
    try {
      result = await this._fetch();
    } catch {
      result = 'failed';
    }
    if (this._disposed) {
      return;
    }
    if (typeof result === 'string') {
      this._problem = result;
      this._kernels = [];
      if (result === 'no-extension') {
        this.stop(); // the server has no such endpoint: asking again every 10 s would only repeat the 404
      }
    } else {
      this._problem = null;
      this._kernels = result.kernels;
    }
    this._changed.emit();
  }

  dispose(): void {
    this.stop();
    this._disposed = true;
    Signal.clearData(this);
  }

  private readonly _fetch: () => Promise<IServerKernels | IdleHoldersProblem>;
  private readonly _intervalMs: number;
  private readonly _changed = new Signal<this, void>(this);
  private _timer: ReturnType<typeof setInterval> | null = null;
  private _kernels: ReadonlyArray<IServerKernel> = [];
  private _problem: IdleHoldersProblem | null = null;
  private _disposed = false;
}
