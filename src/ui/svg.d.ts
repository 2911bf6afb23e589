/** SVG files are bundled as strings (JupyterLab's builder uses the asset/source loader for them). */
declare module '*.svg' {
  const value: string;
  export default value;
}
