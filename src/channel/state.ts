/**
 * The kernel bridge's state machine, as a pure function.
 *
 * The bridge reacts to many asynchronous things (kernel switches, restarts, the bootstrap's answer, comm
 * messages, a timer). Keeping "what state are we in" out of that imperative code makes every blank state the
 * panel can show testable without a kernel, and makes sure each state has a message that tells the user what
 * to do next.
 */
import type { Kernel } from '@jupyterlab/services';

import type { Trans } from '../ui/i18n';
import type { IBridgeState, IKernelEnd, StateName } from '../types';
import { PROTOCOL_VERSION } from '../wire/protocol';

// Declared with the public interfaces' types (tokens.ts names the state).
export type { IBridgeState, IKernelEnd, StateName, WaitingPhase } from '../types';

/** Everything the bridge tells the state machine. */
export type BridgeEvent =
  | { readonly type: 'kernel-changed'; readonly kernelName: string | null; readonly hasSession: boolean }
  | { readonly type: 'kernel-status'; readonly status: Kernel.Status; readonly now: number }
  | { readonly type: 'language'; readonly name: string }
  | { readonly type: 'bootstrap-ok'; readonly version: string; readonly protocol: number }
  | { readonly type: 'bootstrap-missing'; readonly detail: string }
  | { readonly type: 'bootstrap-off' }
  | { readonly type: 'bootstrap-failed'; readonly message: string }
  | {
      readonly type: 'hello';
      readonly protocol: number;
      readonly version: string;
      readonly interval: number;
      readonly now: number;
    }
  | { readonly type: 'sample'; readonly now: number }
  | { readonly type: 'tick'; readonly now: number }
  | { readonly type: 'interval'; readonly interval: number }
  | { readonly type: 'comm-closed' }
  | { readonly type: 'protocol-problem'; readonly message: string };

/** The state before any notebook or console is current. */
export const INITIAL_STATE: IBridgeState = {
  name: 'no-kernel',
  phase: null,
  kernelName: null,
  language: null,
  hasSession: false,
  detail: null,
  closedByKernel: false,
  kernelProtocol: null,
  kernelVersion: null,
  interval: 1,
  lastSampleAt: null,
  lastEnd: null,
  endPending: false
};

/** Samples missed before the panel says "kernel not responding". */
export const STALE_INTERVALS = 3;

/** Never call a kernel stale sooner than this (very short intervals would flicker on network jitter). */
export const MIN_STALE_MS = 1500;

/** How long without a sample until `live` becomes `stale`. */
export function staleAfterMs(interval: number): number {
  return Math.max(STALE_INTERVALS * interval * 1000, MIN_STALE_MS);
}

/** True for the languages the kernel side supports. */
export function isPythonLanguage(name: string): boolean {
  return /^python/i.test(name.trim());
}

/** States in which the comm is (or should be) delivering samples. */
function isConnected(state: IBridgeState): boolean {
  return (
    state.name === 'live' ||
    state.name === 'stale' ||
    state.name === 'error' ||
    (state.name === 'waiting' && state.phase === 'opening')
  );
}

function to(state: IBridgeState, name: StateName, changes: Partial<IBridgeState> = {}): IBridgeState {
  return {
    ...state,
    name,
    phase: null,
    detail: null,
    closedByKernel: false,
    kernelProtocol: null,
    ...changes
  };
}

/**
 * The state after `event`. Returns the same object when the event changes nothing, so callers can compare
 * by reference.
 */
export function next(state: IBridgeState, event: BridgeEvent): IBridgeState {
  switch (event.type) {
    case 'kernel-changed':
      if (event.kernelName === null) {
        return { ...INITIAL_STATE, hasSession: event.hasSession, interval: state.interval };
      }
      return {
        ...INITIAL_STATE,
        name: 'waiting',
        phase: 'starting',
        kernelName: event.kernelName,
        hasSession: true,
        interval: state.interval
      };

    case 'kernel-status': {
      if (state.name === 'no-kernel' || state.name === 'unsupported') {
        return state;
      }
      const restarting = state.name === 'waiting' && state.phase === 'restarting';
      switch (event.status) {
        case 'dead':
          return state.name === 'dead'
            ? state
            : to(state, 'dead', {
                lastSampleAt: null,
                lastEnd: { cause: 'died', restartedByServer: false, at: event.now },
                endPending: true
              });
        case 'autorestarting': {
          // The process died and the server started a new one (JupyterLab says 'restarting' just before).
          const lastEnd: IKernelEnd = {
            cause: 'died',
            restartedByServer: true,
            at: state.endPending ? (state.lastEnd?.at ?? event.now) : event.now
          };
          return to(state, 'waiting', { phase: 'restarting', lastSampleAt: null, lastEnd, endPending: true });
        }
        case 'restarting':
        case 'starting':
          // 'starting' outside our own start-up is a new kernel process: another client restarted it
          // (a REST call, another browser tab), which JupyterLab reports only as this status — or the new
          // process of a restart already noted (then it is the same episode: how it ended stays).
          return restarting || (state.name === 'waiting' && state.phase === 'starting')
            ? state
            : to(state, 'waiting', {
                phase: 'restarting',
                lastSampleAt: null,
                lastEnd:
                  state.endPending && state.lastEnd !== null
                    ? state.lastEnd
                    : { cause: 'restarted', restartedByServer: false, at: event.now },
                endPending: true
              });
        default:
          return state;
      }
    }

    case 'language':
      if (!isPythonLanguage(event.name)) {
        return to(state, 'unsupported', { language: event.name });
      }
      if (state.name === 'waiting' || state.name === 'dead') {
        return to(state, 'waiting', { phase: 'bootstrapping', language: event.name });
      }
      return { ...state, language: event.name };

    case 'bootstrap-ok':
      if (event.protocol !== PROTOCOL_VERSION) {
        return to(state, 'version-mismatch', {
          kernelProtocol: event.protocol,
          kernelVersion: event.version
        });
      }
      return to(state, 'waiting', { phase: 'opening', kernelVersion: event.version });

    case 'bootstrap-missing':
      return to(state, 'not-installed', { detail: event.detail });

    case 'bootstrap-off':
      return to(state, 'autoload-off');

    case 'bootstrap-failed':
      return to(state, 'error', { detail: event.message });

    case 'hello':
      if (event.protocol !== PROTOCOL_VERSION) {
        return to(state, 'version-mismatch', {
          kernelProtocol: event.protocol,
          kernelVersion: event.version
        });
      }
      return to(state, 'live', {
        kernelVersion: event.version,
        interval: event.interval > 0 ? event.interval : state.interval,
        lastSampleAt: event.now,
        endPending: false
      });

    case 'sample':
      if (!isConnected(state)) {
        return state;
      }
      return to(state, 'live', { lastSampleAt: event.now });

    case 'tick':
      if (
        state.name === 'live' &&
        state.lastSampleAt !== null &&
        event.now - state.lastSampleAt > staleAfterMs(state.interval)
      ) {
        return to(state, 'stale', { lastSampleAt: state.lastSampleAt });
      }
      return state;

    case 'interval':
      return event.interval > 0 && event.interval !== state.interval
        ? { ...state, interval: event.interval }
        : state;

    case 'comm-closed':
      if (!isConnected(state)) {
        return state;
      }
      return to(state, 'error', { closedByKernel: true });

    case 'protocol-problem':
      if (!isConnected(state)) {
        return state;
      }
      return to(state, 'error', { detail: event.message, lastSampleAt: state.lastSampleAt });
  }
}

/**
 * The line the panel keeps after the kernel came back, saying how its previous process ended (null: nothing
 * to say — no end seen, or the state's own message says it, while restarting or dead).
 */
export function describeKernelEnd(
  state: IBridgeState,
  trans: Trans,
  time: (at: number) => string
): string | null {
  const end = state.lastEnd;
  if (end === null || state.name === 'dead' || (state.name === 'waiting' && state.phase === 'restarting')) {
    return null;
  }
  if (end.cause === 'died') {
    return trans.__(
      'The kernel died at %1 and the server restarted it: the variables and GPU memory of the old process are gone.',
      time(end.at)
    );
  }
  return trans.__('The kernel was restarted at %1.', time(end.at));
}

/** What the panel shows for a state: a sentence, and optionally a command the user can copy. */
export interface IStateMessage {
  readonly text: string;
  readonly command: string | null;
}

/** The install command shown when the kernel lacks the package. */
export const INSTALL_COMMAND = '%pip install jupyterlab-gpumem';
/** The command that loads the shim by hand when autoload is off. */
export const LOAD_COMMAND = '%load_ext gpumem_kernel';
/** The upgrade command for a protocol mismatch. */
export const UPGRADE_COMMAND = 'pip install -U jupyterlab-gpumem';

/** The user-facing message of a state (translated through `trans`). */
export function describeState(state: IBridgeState, trans: Trans): IStateMessage {
  const plain = (text: string): IStateMessage => ({ text, command: null });
  switch (state.name) {
    case 'no-kernel':
      return plain(
        state.hasSession
          ? trans.__('This notebook has no kernel: select a Python kernel to see its GPU memory')
          : trans.__('Open a notebook or console')
      );
    case 'unsupported':
      return plain(
        trans.__(
          'GPU memory needs a Python kernel; %1 kernels are not supported',
          state.language ?? trans.__('these')
        )
      );
    case 'waiting':
      switch (state.phase) {
        case 'restarting':
          return plain(
            state.lastEnd?.cause === 'died'
              ? trans.__(
                  'The kernel died (its process ended without being asked to, e.g. killed, or out of host memory); the server is restarting it… Variables and GPU memory of the old process are gone.'
                )
              : trans.__('Kernel restarting…')
          );
        case 'bootstrapping':
          return plain(trans.__('Loading gpumem_kernel in the kernel… (waits for a running cell to finish)'));
        case 'opening':
          return plain(trans.__('Connecting to the GPU memory sampler…'));
        default:
          return plain(trans.__('Kernel starting…'));
      }
    case 'not-installed':
      return {
        text: trans.__(
          "gpumem_kernel is not installed in this kernel's environment: run %1 in the notebook, then restart the kernel",
          INSTALL_COMMAND
        ),
        command: INSTALL_COMMAND
      };
    case 'autoload-off':
      return {
        text: trans.__('Automatic loading is off in the settings: run %1 in the notebook', LOAD_COMMAND),
        command: LOAD_COMMAND
      };
    case 'version-mismatch': {
      const kernelProtocol = state.kernelProtocol ?? 0;
      const older = kernelProtocol < PROTOCOL_VERSION;
      return {
        text: older
          ? trans.__(
              "The kernel speaks protocol v%1, this extension speaks v%2 — run %3 in the kernel's environment, then restart the kernel",
              kernelProtocol,
              PROTOCOL_VERSION,
              UPGRADE_COMMAND
            )
          : trans.__(
              "The kernel speaks protocol v%1, this extension speaks v%2 — run %3 in JupyterLab's environment, then reload the page",
              kernelProtocol,
              PROTOCOL_VERSION,
              UPGRADE_COMMAND
            ),
        command: older ? `%${UPGRADE_COMMAND}` : UPGRADE_COMMAND
      };
    }
    case 'live':
      return plain(trans.__('Live'));
    case 'stale':
      return plain(trans.__('Kernel not responding: no sample for %1 intervals', STALE_INTERVALS));
    case 'dead':
      return plain(
        trans.__(
          'The kernel died and the server did not restart it: restart it (Kernel › Restart Kernel…) to see its GPU memory again'
        )
      );
    case 'error':
      if (state.closedByKernel) {
        return plain(
          trans.__(
            'The kernel closed the GPU memory channel (was %1 run?); use Retry to reconnect',
            '%unload_ext gpumem_kernel'
          )
        );
      }
      return plain(trans.__('Error: %1', state.detail ?? trans.__('unknown problem')));
  }
}
