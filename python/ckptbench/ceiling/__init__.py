"""Raw endpoint ceilings: what the endpoint itself carries, with no client library in the way.

``pool`` (N threads, one keep-alive http.client connection each; shared with the range-read
benchmark's raw GET ceiling), ``upload`` (the parallel-upload ceiling the save phase reports).
"""

from ckptbench.ceiling.upload import UploadCeiling, measure_upload_ceiling

__all__ = ["UploadCeiling", "measure_upload_ceiling"]
