#!/usr/bin/perl
# The config file (CRS_BRIDGE_CONFIG, else /etc/crs-bridge/crs-bridge.conf): its keys reach the
# real client and server, environment variables win over it, it is read once per process, and
# a bad file dies at the first call with a message naming the file, the line and the key.
# Each case runs in a new Perl process (the file is read once per process).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::Bin/lib", "$FindBin::Bin/../lib";

use File::Temp qw(tempdir);
use Test::More;
use CRSBridgeTest;
use CRSBridge::Process;

my $DIR = tempdir(CLEANUP => 1);
my $LIB = "$FindBin::Bin/../lib";
my $SERVER = join(' ', @{ CRSBridge::Process::command() });

# Runs Perl code in a new process with the config file holding $text (undef: no file) and the
# environment %env (every other CRS_BRIDGE_* variable removed); returns its output (stdout and
# stderr).
sub run_with_config {
    my ($text, $code, %env) = @_;
    my $path = "$DIR/crs-bridge.conf";
    unlink($path);
    if (defined $text) {
        open(my $fh, '>', $path) or die "$path: $!";
        print {$fh} $text;
        close($fh);
    }
    local %ENV = %ENV;
    delete @ENV{ grep { /^CRS_BRIDGE_/ } keys %ENV };
    @ENV{ keys %env } = values %env;
    $ENV{CRS_BRIDGE_CONFIG} = $path;
    open(my $out, '-|', $^X, "-I$LIB", '-e', "open(STDERR, '>&', \\*STDOUT); $code") or die "perl: $!";
    local $/;
    my $said = <$out> // '';
    close($out);
    return $said;
}

my $SHOW = 'use CRSBridge::Config; print join("|", map { my $v = CRSBridge::Config::get($_); ref $v ? "@$v" : $v } @ARGV), "\n";';

sub settings {
    my ($text, @keys) = @_;
    my %env = ref $keys[0] ? %{ shift @keys } : ();
    my $said = run_with_config($text, "\@ARGV = qw(@keys); $SHOW", %env);
    chomp $said;
    return $said;
}

subtest 'keys, comments, environment over file' => sub {
    my $file = <<"CONF";
# crs-bridge client settings

command: /opt/crs-bridge/bin/crs-bridge serve --max-nodes 64   # a comment after a value
imbalance: normalized
timeout: 2.5
start-timeout: 12
log: syslog
json: PP
record: /var/lib/crs-bridge/record
record-max-files: 3
record-max-bytes: 1048576
CONF
    my @keys = qw(command imbalance timeout start-timeout log json record record-max-files record-max-bytes);
    is(settings($file, @keys),
        '/opt/crs-bridge/bin/crs-bridge serve --max-nodes 64|normalized|2.5|12|syslog|PP|/var/lib/crs-bridge/record|3|1048576',
        'every key as the file says');
    is(settings($file, { CRS_BRIDGE_IMBALANCE => 'raw', CRS_BRIDGE_START_TIMEOUT => '3', CRS_BRIDGE_RECORD_MAX_FILES => 9 },
            qw(imbalance timeout start-timeout record-max-files)),
        'raw|2.5|3|9', 'a variable wins over the file (CRS_BRIDGE_ and the key, dashes as underscores)');
    is(settings($file, { CRS_BRIDGE_IMBALANCE => '' }, 'imbalance'), 'normalized', 'an empty variable counts as unset');
    like(settings(undef, qw(imbalance timeout start-timeout log json record)), qr/^raw\|5\|8\|stderr\|auto\|off$/,
        'no file: the defaults');
};

subtest "the file's command and formula reach the server" => sub {
    my $code = 'use PVE::RS::ResourceScheduling::Static; my $u = PVE::RS::ResourceScheduling::Static->new();'
        . ' $u->add_node("n$_", 8 * $_, 2**34) for 1 .. 3; printf "%.17g\n", $u->calculate_node_imbalance;';
    my $trace = "$DIR/trace";
    is(run_with_config("command: $SERVER --trace $trace\n", $code), "0\n", 'a server answers');
    ok(-s $trace, "the file's command started it (its --trace wrote $trace)");
    unlink($trace);
    is(run_with_config("command: $SERVER --trace $trace\n", $code, CRS_BRIDGE_COMMAND => $SERVER), "0\n",
        'with CRS_BRIDGE_COMMAND set');
    ok(!-e $trace, '... that command runs instead');
    my $loaded = 'use PVE::RS::ResourceScheduling::Dynamic; my $u = PVE::RS::ResourceScheduling::Dynamic->new();'
        . ' $u->add_node("a", { cpu => 6, maxcpu => 8, mem => 2**33, maxmem => 2**35 });'
        . ' $u->add_node("b", { cpu => 1, maxcpu => 8, mem => 2**31, maxmem => 2**35 });'
        . ' $u->add_node("c", { cpu => 2, maxcpu => 16, mem => 2**32, maxmem => 2**35 });'
        . ' printf "%.17g\n", $u->calculate_node_imbalance;';
    my @loads = ([ 6, 8, 2**33, 2**35 ], [ 1, 8, 2**31, 2**35 ], [ 2, 16, 2**32, 2**35 ]);
    my $normalized = run_with_config("command: $SERVER\nimbalance: normalized\n", $loaded);
    cmp_ok(abs($normalized - reference_imbalance(\@loads, 'normalized')), '<', 1e-12, 'imbalance: normalized');
    my $raw = run_with_config("command: $SERVER\n", $loaded);
    cmp_ok(abs($raw - reference_imbalance(\@loads, 'raw')), '<', 1e-12, 'no imbalance key: raw, as the binding');
};

subtest 'a command that is no crs-bridge server: the call says so' => sub {
    my $code = 'use PVE::RS::ResourceScheduling::Static; my $u = PVE::RS::ResourceScheduling::Static->new();'
        . ' $u->add_node("n1", 8, 2**34); print $u->calculate_node_imbalance // "undef", "\n";';
    like(run_with_config("command: /bin/cat\n", $code),
        qr/^crs-bridge: the server answered with neither a result nor an error: is the configured command/,
        'an echo of the request is no answer');
};

subtest 'read once per process' => sub {
    my $path = "$DIR/crs-bridge.conf";
    my $said = run_with_config("imbalance: normalized\n",
        'use CRSBridge::Config; print CRSBridge::Config::get("imbalance"), " ";'
        . " open(my \$fh, '>', '$path') or die; print {\$fh} qq(imbalance: raw\\n); close(\$fh);"
        . ' print CRSBridge::Config::get("imbalance"), "\n";');
    is($said, "normalized normalized\n", 'a change of the file after the first read is not seen');
};

subtest 'bad files: the first call dies naming the file, the line and the key' => sub {
    my $path = "$DIR/crs-bridge.conf";
    my $new = 'use PVE::RS::ResourceScheduling::Static; eval { PVE::RS::ResourceScheduling::Static->new() }; print $@;'
        . ' eval { PVE::RS::ResourceScheduling::Static->new() }; print $@;';
    my %cases = (
        "imbalance: raw\n\ntimout: 5\n" => qr/^crs-bridge: \Q$path\E line 3: unknown key 'timout' \(known: command, imbalance, .*\)\n/,
        "# settings\ntimeout: soon\n" => qr/^crs-bridge: \Q$path\E line 2: timeout must be a positive number of seconds, got 'soon'\n/,
        "timeout: 0\n" => qr/^crs-bridge: \Q$path\E line 1: timeout must be a positive number of seconds, got '0'\n/,
        "imbalance: cv\n" => qr/^crs-bridge: \Q$path\E line 1: imbalance must be 'normalized' or 'raw', got 'cv'\n/,
        "log: server.log\n" => qr/^crs-bridge: \Q$path\E line 1: log must be 'stderr', 'syslog' or an absolute file path, got 'server.log'\n/,
        "record-max-files: -1\n" => qr/^crs-bridge: \Q$path\E line 1: record-max-files must be a positive integer, got '-1'\n/,
        "command: /usr/bin/crs-bridge serve --x 'a\tb'\n" => qr/^crs-bridge: \Q$path\E line 1: command must be a program .*, got /,
        "json: PP\njson: XS\n" => qr/^crs-bridge: \Q$path\E line 2: key 'json' given twice \(first at line 1\)\n/,
        "imbalance raw\n" => qr/^crs-bridge: \Q$path\E line 1: expected 'key: value', got 'imbalance raw'\n/,
    );
    for my $text (sort keys %cases) {
        my $said = run_with_config($text, $new);
        like($said, $cases{$text}, 'a bad file: ' . ($text =~ s/\n/\\n/gr));
        my @errors = split /(?<=\n)(?=crs-bridge:)/, $said;
        is(scalar @errors, 2, '... and the same at the next call') if @errors;
    }
    my $said = run_with_config('', "\$ENV{CRS_BRIDGE_CONFIG} = '$path/x'; $new");
    like($said, qr/^crs-bridge: cannot read the config file \Q$path\E\/x: /, 'an unreadable file (a path through no directory)');
    $said = run_with_config(undef, "\$ENV{CRS_BRIDGE_CONFIG} = '$DIR'; $new");
    like($said, qr/^crs-bridge: the config file \Q$DIR\E is a directory\n/, 'a directory');
    like(run_with_config(undef, $new, CRS_BRIDGE_TIMEOUT => 'soon'),
        qr/^crs-bridge: CRS_BRIDGE_TIMEOUT must be a positive number of seconds, got 'soon'\n/, 'a bad variable: named');
};

done_testing();
