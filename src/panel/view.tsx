/**
 * The whole GPU Memory panel as one React component of the model (the ReactWidget in panel.tsx re-renders it
 * on every model change, i.e. once per sample).
 *
 * Top to bottom: header (kernel, state, time of the sample), the action buttons, the blank-state message when
 * not live, the live figures (the devices, memory that keeps growing, host memory), then the action cards
 * (clear, restart, OOM checklist: the newest open, older ones folded), other kernels holding GPU memory, the
 * sample chart, versions and the kernel side's recent problems. The live figures come before the cards so that a
 * few reports never push the device bar and its numbers out of view. Everything from the kernel is rendered
 * as React text (escaped), never as HTML.
 */
import * as React from 'react';

import { formatTimeOfDay } from '../ui/format';
import type { Trans } from '../ui/i18n';
import { deviceKey, primaryDevice } from '../channel/sample';
import type { ISample } from '../wire/protocol';
import { describeKernelEnd, type IBridgeState, type StateName } from '../channel/state';
import type { IGpuMemActions, IGpuMemModel, IOomOutputs } from '../tokens';
import { ActionBar, ActionCards, type IActionsSectionProps } from '../actions/view';
import { DeviceSection, type IKernelShutdown, type IProcessEnd } from './device';
import { GrowthSection } from './growth';
import { HeldBy } from './heldby';
import { HostSection } from './host';
import { IdleHoldersSection } from './idle';
import type { IdleHoldersModel } from './idleholders';
import { StateMessage } from './statemessage';
import { SampleChart } from './samplechart';

export interface IGpuMemViewProps {
  readonly model: IGpuMemModel;
  readonly trans: Trans;
  readonly onCopy: (text: string) => void;
  /** Clear, restart-and-free and the OOM checklist (absent: the panel only shows memory). */
  readonly actions?: IGpuMemActions | null;
  /** This server's kernels with their GPU memory and idle time (absent: no idle GPU holders list). */
  readonly idle?: Pick<IdleHoldersModel, 'kernels' | 'refresh'> | null;
  /** The full OOM checklists in the notebooks' outputs (absent: the panel shows the full checklist itself). */
  readonly oomOutputs?: IOomOutputs | null;
}

/** A short word for the header badge. */
export function stateBadge(state: IBridgeState, trans: Trans): string {
  switch (state.name) {
    case 'live':
      return trans.__('live');
    case 'stale':
      return trans.__('not responding');
    case 'waiting':
      if (state.phase === 'restarting') {
        return state.lastEnd?.cause === 'died' ? trans.__('kernel died') : trans.__('restarting');
      }
      return trans.__('connecting');
    case 'no-kernel':
      return trans.__('no kernel');
    case 'unsupported':
      return trans.__('unsupported kernel');
    case 'not-installed':
      return trans.__('not installed');
    case 'autoload-off':
      return trans.__('not loaded');
    case 'version-mismatch':
      return trans.__('version mismatch');
    case 'dead':
      return trans.__('kernel dead');
    case 'error':
      return trans.__('error');
  }
}

/** States in which the last sample is still worth showing. */
function showsData(name: StateName): boolean {
  return name === 'live' || name === 'stale' || name === 'error';
}

function Versions(props: { sample: ISample; model: IGpuMemModel; trans: Trans }): JSX.Element {
  const { sample, model, trans } = props;
  const gpu = sample.gpu;
  const torch = sample.kernel.torch;
  const parts: string[] = [];
  if (gpu.driver_version !== null) {
    parts.push(trans.__('driver %1', gpu.driver_version));
  }
  if (gpu.cuda_driver_version !== null) {
    parts.push(trans.__('CUDA %1', gpu.cuda_driver_version));
  }
  if (torch.imported) {
    parts.push(`torch ${torch.version ?? '?'}`);
  }
  if (gpu.visible_devices !== null) {
    parts.push(`CUDA_VISIBLE_DEVICES=${gpu.visible_devices}`);
  }
  if (model.hello !== null) {
    parts.push(`gpumem_kernel ${model.hello.version}`);
  }
  return (
    <footer className="jp-GpuMem-footer">
      {torch.imported && !torch.cuda_initialized && gpu.available && (
        <p className="jp-GpuMem-muted">
          {trans.__(
            'torch has not initialised CUDA in this kernel yet: allocator numbers appear after the first CUDA tensor'
          )}
        </p>
      )}
      <p className="jp-GpuMem-muted">{parts.join(' · ')}</p>
    </footer>
  );
}

function Problems(props: { model: IGpuMemModel; trans: Trans }): JSX.Element | null {
  const { model, trans } = props;
  const problems = model.problems;
  if (problems.length === 0) {
    return null;
  }
  return (
    <details className="jp-GpuMem-problems">
      <summary>
        {trans._n('%1 note from the kernel', '%1 notes from the kernel', problems.length, problems.length)}
      </summary>
      <ul>
        {problems.map((p, i) => (
          <li key={i}>
            <span className="jp-GpuMem-muted">{formatTimeOfDay(p.time)}</span> {p.text}
          </li>
        ))}
      </ul>
    </details>
  );
}

/** The panel's content. */
export function GpuMemView(props: IGpuMemViewProps): JSX.Element {
  const { model, trans } = props;
  const state = model.state;
  const sample = showsData(state.name) ? model.latest : null;
  const settings = model.settings;
  const primary = primaryDevice(sample);
  const busyQueue = model.pendingRequests > 0 && model.kernelStatus === 'busy';
  const manager = props.actions ?? null;
  const current = manager?.current ?? null;
  const kernelEnd = describeKernelEnd(state, trans, at => formatTimeOfDay(at / 1000));
  const shutDown: IKernelShutdown | null =
    manager === null
      ? null
      : { can: id => manager.canShutDownKernel(id), run: id => void manager.shutDownKernel(id) };
  // The kernel ends a process started from its notebook only if it is provably its own descendant.
  const end: IProcessEnd = {
    run: async ref => {
      const result = await model.request('terminate', { pids: [ref] }, 15000);
      return result.terminated.includes(ref.pid)
        ? null
        : (result.refused.find(r => r.pid === ref.pid)?.reason ?? trans.__('not ended'));
    }
  };
  const idle = props.idle ?? null;
  const gpuSeen = sample === null || (sample.gpu.available && sample.gpu.devices.length > 0);
  const actionProps: IActionsSectionProps | null =
    manager !== null && current !== null && model.kernelStatus !== null
      ? {
          actions: current,
          manager,
          unit: settings.units,
          trans,
          onCopy: props.onCopy,
          oomOutputs: props.oomOutputs ?? null,
          gpu: gpuSeen,
          holdsGpu: sample?.gpu.devices.some(d => (d.this_kernel ?? 0) > 0) ?? false
        }
      : null;
  const dataClass = state.name === 'live' ? 'jp-GpuMem-data' : 'jp-GpuMem-data jp-mod-stale';
  // After a shut-down the list is read again at once, so that the kernel leaves it.
  const shutDownIdle: IKernelShutdown | null =
    manager === null || idle === null
      ? null
      : {
          can: id => manager.canShutDownKernel(id),
          run: id => void manager.shutDownKernel(id).then(done => (done ? idle.refresh() : undefined))
        };
  return (
    <div className="jp-GpuMem-root" data-state={state.name}>
      <header className="jp-GpuMem-header">
        <div className="jp-GpuMem-kernel" title={model.kernelLabel ?? ''}>
          {model.kernelLabel ?? trans.__('No kernel')}
        </div>
        <div className="jp-GpuMem-headerLine">
          <span className={`jp-GpuMem-badge jp-GpuMem-badge-${state.name}`}>{stateBadge(state, trans)}</span>
          {sample !== null && (
            <span className="jp-GpuMem-updated" data-seq={sample.seq}>
              {trans.__('updated %1', formatTimeOfDay(sample.time))}
            </span>
          )}
          {busyQueue && <span className="jp-GpuMem-queued">{trans.__('queued: kernel busy')}</span>}
        </div>
      </header>
      {kernelEnd !== null && (
        <p
          className="jp-GpuMem-kernelEnd"
          data-cause={state.lastEnd?.cause}
          data-restarted-by-server={state.lastEnd?.restartedByServer ? 'yes' : 'no'}
          role="status"
        >
          {kernelEnd}
        </p>
      )}
      {actionProps !== null && <ActionBar {...actionProps} />}
      {state.name !== 'live' && (
        <StateMessage
          state={state}
          trans={trans}
          onCopy={props.onCopy}
          onRetry={() => model.retry()}
          onLoadNow={() => model.loadNow()}
        />
      )}
      {sample !== null && (
        <div className={`${dataClass} jp-GpuMem-live`}>
          {(!sample.gpu.available || sample.gpu.devices.length === 0) && (
            <div className="jp-GpuMem-nogpu">
              {trans.__(
                'No NVIDIA GPU visible to this kernel: %1',
                sample.gpu.reason ?? trans.__('NVML lists no device')
              )}
            </div>
          )}
          {sample.gpu.devices.map((device, i) => (
            <DeviceSection
              key={`${deviceKey(device)}#${i}`}
              device={device}
              settings={settings}
              trans={trans}
              labelProcess={p => model.labelProcess(p)}
              shutDown={shutDown}
              end={end}
              heldBy={
                <HeldBy message={model.holders ?? null} device={device} unit={settings.units} trans={trans} />
              }
            />
          ))}
          {model.growth !== undefined && (
            <GrowthSection growth={model.growth} unit={settings.units} trans={trans} />
          )}
          <HostSection host={sample.host} settings={settings} trans={trans} />
        </div>
      )}
      {actionProps !== null && <ActionCards {...actionProps} />}
      {idle !== null && (
        <IdleHoldersSection
          kernels={idle.kernels}
          idleMinutes={settings.idleMinutes}
          unit={settings.units}
          trans={trans}
          shutDown={shutDownIdle}
        />
      )}
      {sample !== null && (
        <div className={dataClass}>
          {primary !== null && (
            <SampleChart
              samples={model.history}
              deviceKey={deviceKey(primary)}
              windowSeconds={settings.historyMinutes * 60}
              warnThreshold={settings.warnThreshold}
              unit={settings.units}
              trans={trans}
              caption={
                primary.cuda_index !== null ? `cuda:${primary.cuda_index}` : `NVML ${primary.nvml_index}`
              }
            />
          )}
          <Versions sample={sample} model={model} trans={trans} />
          <Problems model={model} trans={trans} />
        </div>
      )}
    </div>
  );
}
