"""A Kubernetes API emulator over HTTP for tests, e2e and benchmarks: KMock's emulator, made whole.

`KubeApiEmulator` subclasses `kmock.KubernetesEmulator` and keeps KMock's HTTP server, request
parsing, API discovery and error shape. It replaces the object store, because KMock 0.8 lacks what
Kopf and the kubernetes client rely on: `metadata.resourceVersion` on every write, 422 when a
JSON-patch `test` fails, a list resourceVersion, WATCH `?resourceVersion=` replay (410 Gone when
too old), no event lost between a watch's snapshot and its subscription. It also adds what an
operator needs: CRDs (registered directly or by creating CustomResourceDefinition objects), the
status and scale subresources, generation, label and field selectors, merge/JSON/strategic
patches, PUT, finalizers and ownerReference garbage collection.

Admission: mutating hooks registered with `add_admission()` change objects on create, as a webhook
would (the Kueue stand-in in kuberl_testing.kueue gates queued pods). Not emulated: schema validation of
custom resources, validating admission, RBAC, graceful pod termination (pods are deleted at once;
there is no kubelet). Everything listens on 127.0.0.1 only.

One job per module:
  errors      ApiError, the metav1.Status failure
  patch       merge patch (RFC 7386) and JSON patch (RFC 6902)
  selectors   label and field selectors
  resources   resource types (built-in, from CRDs) and how a URL names one
  scale       the scale subresource
  history     the resourceVersion counter and the event log WATCH replays
  store       object semantics: create (with admission hooks), patch, replace, delete, finalizers,
              garbage collection
  faults      fault injection
  emulator    KubeApiEmulator: HTTP dispatch and WATCH streaming over the store
  kubeconfig  a kubeconfig pointing at the emulator
  serving     serve_emulator (async) and EmulatorThread (sync)
  __main__    the process: `python -m kuberl_testing.apiserver --port 0 --kubeconfig PATH`
"""

from kuberl_testing.apiserver.emulator import KubeApiEmulator
from kuberl_testing.apiserver.errors import ApiError
from kuberl_testing.apiserver.kubeconfig import kubeconfig, write_kubeconfig
from kuberl_testing.apiserver.patch import json_patch, merge_patch
from kuberl_testing.apiserver.resources import BUILTIN_TYPES, ResourceType, resource_target
from kuberl_testing.apiserver.selectors import field_selector_matches, label_selector_matches
from kuberl_testing.apiserver.serving import EmulatorThread, serve_emulator

__all__ = [
    "BUILTIN_TYPES",
    "ApiError",
    "EmulatorThread",
    "KubeApiEmulator",
    "ResourceType",
    "field_selector_matches",
    "json_patch",
    "kubeconfig",
    "label_selector_matches",
    "merge_patch",
    "resource_target",
    "serve_emulator",
    "write_kubeconfig",
]
