import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyterlab-gpumem:plugin',
  autoStart: true,
  activate: (_app: JupyterFrontEnd) => {
    console.log('jupyterlab-gpumem activated');
  }
};

export default plugin;
