"""tracerecon: true GPU-side phase times from Nsight Systems traces."""

__version__ = "0.1.0"
