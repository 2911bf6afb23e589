/**
 * How the analysis output words a figure: sizes in binary units picked per value, the engine that produced a
 * figure, and a figure of the payload by name. Shared by the cards, the bar, the chart and the tables.
 */
import type { FigureEngine, IAnalysisPayload, IFigure } from '../../wire/analysispayload';
import { formatBytes, NOT_MEASURED } from '../../ui/format';
import type { Trans } from '../../ui/i18n';

/** Sizes in the analysis: binary units picked per value (KiB for the small models of tests and examples). */
export function size(bytes: number | null | undefined): string {
  return formatBytes(bytes, 'auto');
}

export function figure(payload: IAnalysisPayload, name: string): IFigure | undefined {
  return payload.figures.find(f => f.name === name);
}

/** A figure engine in words. */
export function engineLabel(engine: FigureEngine | 'n/a', trans: Trans): string {
  switch (engine) {
    case 'read':
      return trans.__('read');
    case 'traced':
      return trans.__('traced');
    case 'measured':
      return trans.__('measured');
    case 'modelled':
      return trans.__('modelled');
    case 'estimate':
      return trans.__('estimate');
    case 'nvml':
      return trans.__('measured (NVML)');
    case 'source':
      return trans.__('PyTorch default');
    default:
      return NOT_MEASURED;
  }
}
