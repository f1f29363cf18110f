"""`gpualign ensure`: make every driver image the fleet needs exist in the ledger, and prove it fits its kernel.

- `tagspec`: a precompiled tag (<branch>-<kernel>-<os-tag>) taken apart, and what each OS family can build here;
- `kmod`: a kernel module's own records (vermagic, version, imported symbol CRCs, exports, signature), read from
  its ELF sections as the kernel reads them at load;
- `symvers`: a kernel's Module.symvers;
- `verify`: the kernel's load checks, offline: vermagic, every imported CRC, the driver version;
- `debian`: the Debian 12 recipe, run for real (a bookworm build root, NVIDIA's module source, the kernel headers);
- `recipes`: the Ubuntu and RHEL recipes, rendered only (their archives are not reachable here);
- `image`: the driver image (buildah) and its push; `mirror`: copying a published image (skopeo);
- `run`: one ensure pass over a set of tags.
"""
