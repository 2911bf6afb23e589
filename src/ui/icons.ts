/**
 * The extension's icon: the side-panel tab, the settings editor and the command palette use it.
 * Registered under a name so that the settings schema can refer to it ("jupyter.lab.setting-icon").
 */
import { LabIcon } from '@jupyterlab/ui-components';

import gpuSvgStr from '../../style/icons/gpu.svg';

export const gpuIcon = new LabIcon({ name: 'jupyterlab-gpumem:gpu', svgstr: gpuSvgStr });
