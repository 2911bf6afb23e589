"""Real training steps on the GPU: the measured engine and the workbench autobatch and the benchmark run on."""
