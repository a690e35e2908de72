// SPDX-License-Identifier: BSD-2-Clause
// What a program written for ConnectX learns of emu0 through mlx5dv and the device's PCI directory,
// under each personality (EMU_PERSONALITY): dv_identity emu|mlx5. Exits 0 when every answer is the
// expected one, else prints the first wrong one and exits 1.
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <stdio.h>
#include <string.h>

static int failed(const char *what) {
  printf("FAIL %s\n", what);
  return 1;
}

// The first line of /sys/class/infiniband/<dev>/device/<file>, parsed as a number.
static long pci_id(const char *dev, const char *file) {
  char path[256];
  snprintf(path, sizeof path, "/sys/class/infiniband/%s/device/%s", dev, file);
  FILE *f = fopen(path, "r");
  long v = -1;
  if (f) {
    if (fscanf(f, "%li", &v) != 1) v = -1;
    fclose(f);
  }
  return v;
}

int main(int argc, char **argv) {
  int mlx5 = argc > 1 && strcmp(argv[1], "mlx5") == 0;
  struct ibv_device **list = ibv_get_device_list(NULL);
  if (!list || !list[0] || strcmp(ibv_get_device_name(list[0]), "emu0") != 0)
    return failed("emu0 is the first device");
  struct ibv_device *dev = list[0];
  if (mlx5dv_is_supported(dev) != mlx5) return failed("mlx5dv_is_supported");
  // No DEVX either way: NULL with EOPNOTSUPP, as libmlx5 answers for a device it does not drive.
  errno = 0;
  if (mlx5dv_open_device(dev, NULL) != NULL || errno != EOPNOTSUPP)
    return failed("mlx5dv_open_device is NULL with EOPNOTSUPP");
  struct ibv_context *ctx = ibv_open_device(dev);
  if (!ctx) return failed("ibv_open_device");
  struct ibv_device_attr attr;
  if (ibv_query_device(ctx, &attr)) return failed("ibv_query_device");
  if (attr.vendor_id != (mlx5 ? 0x2c9u : 0xffffffu)) return failed("vendor_id");
  if (pci_id("emu0", "vendor") != (mlx5 ? 0x15b3 : 0xffffff)) return failed("PCI vendor");
  if (pci_id("emu0", "device") != (long)attr.vendor_part_id) return failed("PCI device");
  // Objects in mlx5dv form are not handed out yet: refused, not half made.
  struct ibv_cq_init_attr_ex cq_attr = {.cqe = 16};
  errno = 0;
  if (mlx5dv_create_cq(ctx, &cq_attr, NULL) != NULL || errno != EOPNOTSUPP)
    return failed("mlx5dv_create_cq is EOPNOTSUPP");
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  if (!cq) return failed("ibv_create_cq");
  struct mlx5dv_cq dv_cq;
  struct mlx5dv_obj obj = {.cq = {.in = cq, .out = &dv_cq}};
  if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) != EOPNOTSUPP) return failed("mlx5dv_init_obj");
  ibv_destroy_cq(cq);
  ibv_close_device(ctx);
  ibv_free_device_list(list);
  printf("PASS %s\n", mlx5 ? "mlx5" : "emu");
  return 0;
}
