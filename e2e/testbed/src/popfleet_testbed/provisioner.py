"""A tiny dynamic provisioner: a hostPath PersistentVolume for every claim of our class.

Why: StatefulSet ``volumeClaimTemplates`` create PVCs that must bind before the scheduler
places the pod, and there is no storage backend. The provisioner (run inside the kubelet
process, with its own admin identity because no node may create PVs):

1. makes sure the StorageClass ``testbed-local`` exists and is the default (so the
   DefaultStorageClass admission plugin gives it to claims that name none), with
   ``volumeBindingMode: WaitForFirstConsumer``;
2. for each Pending claim of that class without a volume that the scheduler has picked a
   node for (``volume.kubernetes.io/selected-node``), creates ``pvc-<claim uid>``: a hostPath
   PV on ``<state>/volumes/pvc-<claim uid>/`` pre-bound to the claim (``claimRef``), capacity
   and access modes copied from the claim; the PV controller then binds them;
3. deletes the directory and the PV when a PV it provisioned is ``Released`` (its claim was
   deleted; reclaim policy Delete).

A claim's directory therefore lives exactly as long as the claim: a replaced StatefulSet pod
finds its data again.

Why WaitForFirstConsumer (as kind's local-path class): with ``Immediate`` binding the
scheduler first finds a new StatefulSet pod's claim unbound, parks the pod as unschedulable
and relies on the claim's update event to try again; now and then that retry waited for the
scheduler's 5-minute flush of unschedulable pods (a CI flake: ``rolling-2`` Pending with
"unbound immediate PersistentVolumeClaims" for 3 minutes). With delayed binding the scheduler
picks the node, names it on the claim and waits in its binding step until the claim is bound.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from popfleet_testbed import errors, kube

Obj = dict[str, Any]

STORAGE_CLASS = "testbed-local"
PROVISIONER = "popfleet.io/testbed-local"
BINDING_MODE = "WaitForFirstConsumer"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


class Provisioner:
    def __init__(self, client: kube.Kube, root: Path) -> None:
        self._kube = client
        self._root = root
        self._class_ready = False

    def _ensure_class(self) -> None:
        if self._class_ready:
            return
        body = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": STORAGE_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": BINDING_MODE,
        }
        path = "/apis/storage.k8s.io/v1/storageclasses"
        try:
            self._kube.create(path, body)
        except errors.KubeError as exc:
            if exc.status != 409:
                raise
            # A testbed kept from an older version: the binding mode is immutable.
            found = self._kube.get(f"{path}/{STORAGE_CLASS}")
            if found.get("volumeBindingMode") != BINDING_MODE:
                self._kube.delete(f"{path}/{STORAGE_CLASS}")
                return  # created again on a later step, once the old one is gone
        self._class_ready = True

    def step(self) -> None:
        self._ensure_class()
        for pvc in self._kube.items("/api/v1/persistentvolumeclaims"):
            spec = pvc.get("spec", {})
            if (
                spec.get("storageClassName") == STORAGE_CLASS
                and not spec.get("volumeName")
                and pvc.get("status", {}).get("phase", "Pending") == "Pending"
                and (pvc["metadata"].get("annotations") or {}).get(SELECTED_NODE)
                and not pvc["metadata"].get("deletionTimestamp")
            ):
                self._provision(pvc)
        for pv in self._kube.items("/api/v1/persistentvolumes"):
            annotations = pv["metadata"].get("annotations") or {}
            if (
                annotations.get("pv.kubernetes.io/provisioned-by") == PROVISIONER
                and pv.get("status", {}).get("phase") == "Released"
            ):
                shutil.rmtree(self._root / pv["metadata"]["name"], ignore_errors=True)
                self._kube.delete(f"/api/v1/persistentvolumes/{pv['metadata']['name']}")

    def _provision(self, pvc: Obj) -> None:
        meta, spec = pvc["metadata"], pvc["spec"]
        name = f"pvc-{meta['uid']}"
        directory = self._root / name
        directory.mkdir(parents=True, exist_ok=True)
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": name,
                "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
                "labels": {"popfleet.io/testbed": "true"},
            },
            "spec": {
                "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": STORAGE_CLASS,
                "volumeMode": spec.get("volumeMode", "Filesystem"),
                "hostPath": {"path": str(directory), "type": "DirectoryOrCreate"},
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
            },
        }
        try:
            self._kube.create("/api/v1/persistentvolumes", body)
        except errors.KubeError as exc:
            if exc.status != 409:
                raise
