"""Helpers the tests share with the benchmarks: local Ray and MLflow servers, headless Chromium."""
