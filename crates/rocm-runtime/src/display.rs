//! Whether an AMD GPU drives a display, from sysfs: a desktop's GPU must not be run out of memory
//! or kept busy for seconds (the compositor shares it), so the test kit and `gpu-test` default to
//! a small budget and one test at a time there.
//!
//! A card drives a display when its PCI function is the boot VGA device (`boot_vga` = 1: the
//! firmware console, then usually the desktop, is on it) or one of its DRM connectors reports
//! `connected`. NVIDIA needs none of this: its driver reports the display watchdog as the
//! kernel-execution timeout attribute.

use std::path::Path;

/// Whether the DRM card of the GPU on PCI bus `bus` drives a display, reading the DRM class
/// folder `drm` (`/sys/class/drm`). False when sysfs says nothing (no such card, no sysfs).
pub(crate) fn amd_drives_display(drm: &Path, bus: u32) -> bool {
    let Ok(entries) = std::fs::read_dir(drm) else { return false };
    let names: Vec<String> =
        entries.flatten().filter_map(|e| e.file_name().to_str().map(str::to_string)).collect();
    for card in names.iter().filter(|n| n.starts_with("card") && !n.contains('-')) {
        let device = drm.join(card).join("device");
        if pci_bus(&device) != Some(bus) {
            continue;
        }
        let boot_vga = std::fs::read_to_string(device.join("boot_vga")).is_ok_and(|v| v.trim() == "1");
        let connected = names.iter().filter(|n| n.starts_with(&format!("{card}-"))).any(|connector| {
            std::fs::read_to_string(drm.join(connector).join("status")).is_ok_and(|s| s.trim() == "connected")
        });
        if boot_vga || connected {
            return true;
        }
    }
    false
}

/// The bus number of the PCI function a `device` link points to (`../../../0000:03:00.0`).
fn pci_bus(device: &Path) -> Option<u32> {
    let target = std::fs::read_link(device).ok()?;
    let address = target.file_name()?.to_str()?.to_string();
    let mut parts = address.split(':');
    let (_domain, bus) = (parts.next()?, parts.next()?);
    u32::from_str_radix(bus, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake /sys/class/drm: card0 on bus 0x03 (connector states as given), card1 on bus 0xc1.
    fn fake_drm(name: &str, boot_vga: &str, connector: &str) -> std::path::PathBuf {
        let root = std::env::temp_dir().join(format!("rocmforge-drm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let pci = root.join("pci");
        for (card, address) in [("card0", "0000:03:00.0"), ("card1", "0000:c1:00.0")] {
            std::fs::create_dir_all(pci.join(address)).unwrap();
            std::fs::create_dir_all(root.join("drm").join(card)).unwrap();
            std::os::unix::fs::symlink(pci.join(address), root.join("drm").join(card).join("device"))
                .unwrap();
        }
        std::fs::write(pci.join("0000:03:00.0/boot_vga"), boot_vga).unwrap();
        std::fs::create_dir_all(root.join("drm/card0-DP-1")).unwrap();
        std::fs::write(root.join("drm/card0-DP-1/status"), connector).unwrap();
        std::fs::create_dir_all(root.join("drm/card1-HDMI-A-1")).unwrap();
        std::fs::write(root.join("drm/card1-HDMI-A-1/status"), "disconnected\n").unwrap();
        root
    }

    #[test]
    fn a_connected_connector_or_the_boot_vga_flag_means_a_display() {
        let root = fake_drm("connected", "0\n", "connected\n");
        assert!(amd_drives_display(&root.join("drm"), 0x03));
        assert!(!amd_drives_display(&root.join("drm"), 0xc1), "card1's connector is disconnected");
        assert!(!amd_drives_display(&root.join("drm"), 0x44), "no card on that bus");
        std::fs::remove_dir_all(&root).unwrap();

        let root = fake_drm("bootvga", "1\n", "disconnected\n");
        assert!(amd_drives_display(&root.join("drm"), 0x03));
        std::fs::remove_dir_all(&root).unwrap();

        let root = fake_drm("headless", "0\n", "disconnected\n");
        assert!(!amd_drives_display(&root.join("drm"), 0x03));
        std::fs::remove_dir_all(&root).unwrap();
        assert!(!amd_drives_display(Path::new("/nonexistent/drm"), 0x03));
    }
}
