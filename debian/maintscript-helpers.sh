# Shared by the maintainer scripts: the build puts this file where a script says #HELPERS#.

# libpve-rs-perl's binding modules, which the package diverts (renames to FILE.distrib) and
# replaces by its drop-ins while installed.
DIVERTED="/usr/share/perl5/PVE/RS/ResourceScheduling/Static.pm /usr/share/perl5/PVE/RS/ResourceScheduling/Dynamic.pm"

# pve-ha-crm loads the scheduler modules once, when it starts: restart it, only if it runs (as
# pve-ha-manager's own postinst does), so that its next round uses the modules now in place.
# pve-ha-lrm never loads them (only PVE::HA::Manager, the CRM, does).
restart_ha_crm() {
    if [ -d /run/systemd/system ] && systemctl --quiet is-active pve-ha-crm.service 2>/dev/null; then
        deb-systemd-invoke try-restart pve-ha-crm.service || true
    fi
}

# The Python tree for the interpreter /usr/bin/python3 is now (the package carries one per
# supported version), or nothing if there is none for it.
python_tree() {
    tree=/usr/lib/crs-bridge/python$(python3 -I -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [ -d "$tree" ] && echo "$tree" || true
}
