/**
 * The captions of batch-size picks (the analysis' recommended and safe batches, autobatch's recommended batch)
 * and of the sequence-length picks (`--search seq`'s recommended and safe lengths at each batch):
 * what share of the maximum a pick really is, computed here from the two numbers shown, and the rule that made
 * it (the aim, the rounding). The kernel words its text and HTML the same way (gpumem_kernel/analysis/picks.py),
 * with the same half-up rounding of the percentage.
 */
import type { IAnalysisPayload, IAnalysisSequenceSearchResults } from '../wire/analysispayload';
import type { Trans } from '../ui/i18n';

/**
 * The shares of the maximum the recommended and safe picks aim at. A payload says them in
 * `settings.pick_shares`; outputs written before it did used these.
 */
const SHARES_BEFORE_PAYLOADS_SAID: Readonly<Record<'recommended' | 'safe', number>> = {
  recommended: 0.6,
  safe: 0.4
};

/** 100 · part / whole, rounded half up (Python's picks.percent does the same). */
export function percent(part: number, whole: number): number {
  return Math.floor((100 * part) / whole + 0.5);
}

/** How an aim became a pick, from a payload's `rounding` label ("power of two", "multiple of 8", "none"). */
export function roundingRule(label: string, trans: Trans): string {
  const multiple = /^multiple of (\d+)$/.exec(label);
  if (multiple) {
    return trans.__('rounded down to a multiple of %1', multiple[1]);
  }
  switch (label) {
    case 'power of two':
      return trans.__('rounded down to a power of two');
    case 'none':
      return trans.__('rounded down to a whole batch');
    default:
      return trans.__('rounded down to a %1', label);
  }
}

/** Where the rounding came from, in words (null for outputs written before payloads said it). */
export function roundingSource(
  source: 'option' | 'setting' | 'default' | undefined,
  trans: Trans
): string | null {
  switch (source) {
    case 'option':
      return trans.__('--round');
    case 'setting':
      return trans.__('JupyterLab setting');
    case 'default':
      return trans.__('default');
    default:
      return null;
  }
}

/** "multiple of 8 (JupyterLab setting)". */
export function roundingText(
  label: string,
  source: 'option' | 'setting' | 'default' | undefined,
  trans: Trans
): string {
  const where = roundingSource(source, trans);
  return where === null ? label : `${label} (${where})`;
}

/** "50% of the maximum 507; aim 60%, rounded down to a power of two". */
export function shareCaption(
  pick: number,
  maximum: number,
  aim: number,
  roundingLabel: string,
  trans: Trans
): string {
  return trans.__(
    '%1% of the maximum %2; aim %3%, %4',
    percent(pick, maximum),
    maximum,
    percent(aim, 1),
    roundingRule(roundingLabel, trans)
  );
}

/** "38% below the maximum 26; margin 10%, rounded down to a power of two". */
export function belowCaption(
  pick: number,
  maximum: number,
  margin: number,
  roundingLabel: string,
  trans: Trans
): string {
  return trans.__(
    '%1% below the maximum %2; margin %3%, %4',
    percent(maximum - pick, maximum),
    maximum,
    percent(margin, 1),
    roundingRule(roundingLabel, trans)
  );
}

/** The caption of an analysis pick, or null when there is no maximum to compare it with. */
export function analysisPickCaption(
  payload: IAnalysisPayload,
  pick: 'recommended' | 'safe',
  trans: Trans
): string | null {
  const recs = payload.recommendations;
  return pickCaption(payload, pick, recs[pick], recs.maximum, recs.rounding, trans);
}

/**
 * The caption of a sequence-length pick (`--search seq`): the same shares as the batch picks, rounded down to a
 * multiple of the search's `multiple` tokens ("58% of the maximum 1984; aim 60%, rounded down to a multiple of
 * 64"); null when there is no maximum. Below the length up to which every length fits when a shorter length
 * needs more than the longest (the payload's `variable`): the kernel takes the picks there.
 */
export function sequencePickCaption(
  payload: IAnalysisPayload,
  result: IAnalysisSequenceSearchResults,
  multiple: number,
  pick: 'recommended' | 'safe',
  trans: Trans
): string | null {
  const rounding = multiple > 1 ? `multiple of ${multiple}` : 'none';
  const every = result.variable?.every_length ?? null;
  const value = result[pick];
  if (every !== null && every > 0 && value !== null && result.maximum !== null && every < result.maximum) {
    // a shorter length needs more than the longest: the kernel took the picks below the length every one fits up to
    const aim = payload.settings.pick_shares?.[pick] ?? SHARES_BEFORE_PAYLOADS_SAID[pick];
    return trans.__(
      '%1% of %2, the length up to which every length fits; aim %3%, %4',
      percent(value, every),
      every,
      percent(aim, 1),
      roundingRule(rounding, trans)
    );
  }
  return pickCaption(payload, pick, value, result.maximum, rounding, trans);
}

function pickCaption(
  payload: IAnalysisPayload,
  pick: 'recommended' | 'safe',
  value: number | null,
  maximum: number | null,
  rounding: string,
  trans: Trans
): string | null {
  if (!maximum || value === null) {
    return null;
  }
  const aim = payload.settings.pick_shares?.[pick] ?? SHARES_BEFORE_PAYLOADS_SAID[pick];
  return shareCaption(value, maximum, aim, rounding, trans);
}
