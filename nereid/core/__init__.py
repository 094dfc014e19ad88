"""The request core: the engine every frontend calls and the path of a request through it."""
